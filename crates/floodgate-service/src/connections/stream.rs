//! The byte streams connections are served over: TCP, a unix socket or TLS over them
//! ([`Conn`]), watched for
//! their first bytes ([`Watched`]).

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One accepted connection's stream.
#[derive(Debug)]
pub enum Conn {
    /// A TCP connection.
    Tcp(tokio::net::TcpStream),
    /// A unix socket connection (the gRPC API on envoyproxy/ratelimit's `GRPC_UDS`).
    Unix(tokio::net::UnixStream),
    /// A TLS session over one of the others ([`super::tls`]).
    Tls(Box<tokio_rustls::server::TlsStream<Conn>>),
}

impl From<tokio::net::TcpStream> for Conn {
    fn from(stream: tokio::net::TcpStream) -> Conn {
        Conn::Tcp(stream)
    }
}

macro_rules! each {
    ($conn:expr, $s:ident => $e:expr) => {
        match $conn {
            Conn::Tcp($s) => $e,
            Conn::Unix($s) => $e,
            Conn::Tls($s) => $e,
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        each!(self, s => s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_shutdown(cx))
    }
}

/// The bytes a connection must send within [`Admission::first_bytes`](super::Admission::first_bytes): an HTTP/2 preface's
/// length (an HTTP/1.1 request head this long is timed by hyper's header timer instead).
pub(crate) const PREFACE: usize = 24;

/// A connection's stream, counting the bytes read from it up to [`PREFACE`].
#[derive(Debug)]
pub(crate) struct Watched {
    inner: Conn,
    seen: Arc<AtomicUsize>,
}

impl Watched {
    /// `inner`, its first bytes counted in `seen`.
    pub(crate) fn new(inner: Conn, seen: Arc<AtomicUsize>) -> Watched {
        Watched { inner, seen }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 && self.seen.load(Ordering::Relaxed) < PREFACE {
            self.seen.fetch_add(read, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
