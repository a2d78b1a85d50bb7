//! memcached's text protocol, the part the store speaks: the commands it sends and the
//! replies it reads, each reply told apart (`NOT_FOUND`, `NOT_STORED`, `EXISTS` are answers,
//! not failures; `ERROR`, `CLIENT_ERROR` and `SERVER_ERROR` are the server's refusals).
//!
//! A key is 1 to 250 bytes with no byte at or below space and no DEL (0x7f), as memcached and
//! gomemcache require: [`check_key`] refuses any other before a byte is written, so a key can
//! never split a command line. Values are written as data blocks with flags 0.

use std::fmt::Write as _;

use crate::StoreError;

/// The longest key memcached takes, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 250;

/// A command, encoded by [`Command::encode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// `incr key by`: the new value, or `NOT_FOUND`.
    Incr { key: String, by: u64 },
    /// `decr key by` (never below 0): the new value, or `NOT_FOUND`.
    Decr { key: String, by: u64 },
    /// `add key 0 exptime len` + value: `STORED`, or `NOT_STORED` when the key exists.
    Add {
        key: String,
        value: Vec<u8>,
        exptime: u32,
    },
    /// `get key`: the value, or nothing.
    Get { key: String },
    /// `gets key`: the value and its cas unique, or nothing.
    Gets { key: String },
    /// `cas key 0 exptime len unique` + value: `STORED`, `EXISTS` or `NOT_FOUND`.
    Cas {
        key: String,
        value: Vec<u8>,
        exptime: u32,
        unique: u64,
    },
    /// `delete key`: `DELETED` or `NOT_FOUND`.
    Delete { key: String },
}

/// A reply, as read by [`read_reply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A number (`incr`, `decr`).
    Number(u64),
    /// `NOT_FOUND`.
    NotFound,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`.
    NotStored,
    /// `EXISTS`.
    Exists,
    /// `DELETED`.
    Deleted,
    /// The answer to `get`/`gets`: the value and its cas unique (0 for `get`), or `None`.
    Value(Option<(Vec<u8>, u64)>),
    /// `ERROR`, `CLIENT_ERROR …` or `SERVER_ERROR …`: the line as the server wrote it.
    Error(String),
}

impl Command {
    /// Appends the command's bytes to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut line = String::new();
        let block = match self {
            Command::Incr { key, by } => {
                let _ = write!(line, "incr {key} {by}\r\n");
                None
            }
            Command::Decr { key, by } => {
                let _ = write!(line, "decr {key} {by}\r\n");
                None
            }
            Command::Add {
                key,
                value,
                exptime,
            } => {
                let _ = write!(line, "add {key} 0 {exptime} {}\r\n", value.len());
                Some(value)
            }
            Command::Get { key } => {
                let _ = write!(line, "get {key}\r\n");
                None
            }
            Command::Gets { key } => {
                let _ = write!(line, "gets {key}\r\n");
                None
            }
            Command::Cas {
                key,
                value,
                exptime,
                unique,
            } => {
                let _ = write!(line, "cas {key} 0 {exptime} {} {unique}\r\n", value.len());
                Some(value)
            }
            Command::Delete { key } => {
                let _ = write!(line, "delete {key}\r\n");
                None
            }
        };
        out.extend_from_slice(line.as_bytes());
        if let Some(value) = block {
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Refuses a key memcached would refuse (or that would break the command line): empty, over
/// [`MAX_KEY_BYTES`], or holding a byte at or below space or DEL. A
/// [`StoreError::NotOnStore`], raised before anything is sent.
pub(crate) fn check_key(key: &str) -> Result<(), StoreError> {
    let reason = if key.is_empty() {
        "an empty key"
    } else if key.len() > MAX_KEY_BYTES {
        "a key longer than memcached's 250 bytes"
    } else if key.bytes().any(|b| b <= b' ' || b == 0x7f) {
        "a key with a space or a control character, which memcached refuses"
    } else {
        return Ok(());
    };
    Err(StoreError::NotOnStore {
        store: "memcached",
        algorithm: "any",
        reason,
    })
}

/// Something that yields the reply's bytes: a line (without `\r\n`) or a block of `len` bytes
/// followed by `\r\n`.
pub(crate) trait ReplySource {
    /// The next line, without its `\r\n`.
    fn line(&mut self) -> impl std::future::Future<Output = std::io::Result<String>> + Send;
    /// The next `len` bytes and the `\r\n` after them.
    fn block(
        &mut self,
        len: usize,
    ) -> impl std::future::Future<Output = std::io::Result<Vec<u8>>> + Send;
}

/// Reads the reply to `command` from `source`. `Err` only when the bytes are not a reply (or
/// the link fails): [`StoreError::Protocol`] or the link's error.
pub(crate) async fn read_reply<S: ReplySource>(
    source: &mut S,
    command: &Command,
) -> Result<Reply, ReadError> {
    let line = source.line().await.map_err(ReadError::Link)?;
    if line == "ERROR" || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR") {
        return Ok(Reply::Error(line));
    }
    let reply = match command {
        Command::Get { .. } | Command::Gets { .. } => return read_value(source, line).await,
        _ => match line.as_str() {
            "NOT_FOUND" => Some(Reply::NotFound),
            "STORED" => Some(Reply::Stored),
            "NOT_STORED" => Some(Reply::NotStored),
            "EXISTS" => Some(Reply::Exists),
            "DELETED" => Some(Reply::Deleted),
            // `incr`/`decr` answer the number, which may carry trailing spaces on old servers.
            number => number.trim_end().parse().ok().map(Reply::Number),
        },
    };
    reply.ok_or_else(|| unexpected(&line))
}

/// `VALUE key flags len [unique]`, the block, then `END`; or just `END`.
async fn read_value<S: ReplySource>(source: &mut S, line: String) -> Result<Reply, ReadError> {
    if line == "END" {
        return Ok(Reply::Value(None));
    }
    let mut words = line.split(' ');
    let (Some("VALUE"), Some(_key), Some(_flags), Some(len)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(unexpected(&line));
    };
    let len: usize = len.parse().map_err(|_| unexpected(&line))?;
    let unique = match words.next() {
        Some(u) => u.parse().map_err(|_| unexpected(&line))?,
        None => 0,
    };
    let value = source.block(len).await.map_err(ReadError::Link)?;
    let end = source.line().await.map_err(ReadError::Link)?;
    if end != "END" {
        return Err(unexpected(&end));
    }
    Ok(Reply::Value(Some((value, unique))))
}

fn unexpected(line: &str) -> ReadError {
    let shown: String = line.chars().take(80).collect();
    ReadError::Protocol(StoreError::Protocol(format!(
        "memcached answered {shown:?}, which is no reply to the command sent (is it a memcached?)"
    )))
}

/// Why a reply could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The link failed (closed, reset): the connection is lost.
    Link(std::io::Error),
    /// The bytes are not a memcached reply.
    Protocol(StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    struct Lines(VecDeque<Vec<u8>>);

    impl ReplySource for Lines {
        async fn line(&mut self) -> std::io::Result<String> {
            let l = self
                .0
                .pop_front()
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            Ok(String::from_utf8(l).unwrap())
        }
        async fn block(&mut self, len: usize) -> std::io::Result<Vec<u8>> {
            let b = self
                .0
                .pop_front()
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            assert_eq!(b.len(), len);
            Ok(b)
        }
    }

    fn read(lines: &[&str], command: &Command) -> Result<Reply, ReadError> {
        let mut source = Lines(lines.iter().map(|l| l.as_bytes().to_vec()).collect());
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(read_reply(&mut source, command));
        match std::future::Future::poll(f.as_mut(), &mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => unreachable!(),
        }
    }

    #[test]
    fn commands_encode_as_memcached_reads_them() {
        let mut out = Vec::new();
        Command::Incr {
            key: "k".into(),
            by: 3,
        }
        .encode(&mut out);
        Command::Add {
            key: "k".into(),
            value: b"3".to_vec(),
            exptime: 61,
        }
        .encode(&mut out);
        Command::Cas {
            key: "k".into(),
            value: b"ab".to_vec(),
            exptime: 0,
            unique: 9,
        }
        .encode(&mut out);
        assert_eq!(
            out,
            b"incr k 3\r\nadd k 0 61 1\r\n3\r\ncas k 0 0 2 9\r\nab\r\n".to_vec()
        );
    }

    #[test]
    fn replies_are_told_apart() {
        let incr = Command::Incr {
            key: "k".into(),
            by: 1,
        };
        assert_eq!(read(&["12"], &incr).unwrap(), Reply::Number(12));
        assert_eq!(read(&["NOT_FOUND"], &incr).unwrap(), Reply::NotFound);
        assert_eq!(read(&["NOT_STORED"], &incr).unwrap(), Reply::NotStored);
        assert_eq!(read(&["EXISTS"], &incr).unwrap(), Reply::Exists);
        let e = "CLIENT_ERROR cannot increment or decrement non-numeric value";
        assert_eq!(read(&[e], &incr).unwrap(), Reply::Error(e.into()));
        assert!(matches!(
            read(&["+PONG"], &incr),
            Err(ReadError::Protocol(StoreError::Protocol(_)))
        ));
        let gets = Command::Gets { key: "k".into() };
        assert_eq!(
            read(&["VALUE k 0 2 77", "ab", "END"], &gets).unwrap(),
            Reply::Value(Some((b"ab".to_vec(), 77)))
        );
        assert_eq!(read(&["END"], &gets).unwrap(), Reply::Value(None));
    }

    #[test]
    fn keys_memcached_refuses_are_refused_here() {
        assert!(check_key("ns:user_1").is_ok());
        assert!(check_key(&"k".repeat(250)).is_ok());
        for bad in [
            String::new(),
            "k".repeat(251),
            "a b".into(),
            "a\nb".into(),
            "a\u{7f}".into(),
        ] {
            assert!(
                matches!(check_key(&bad), Err(StoreError::NotOnStore { .. })),
                "{bad:?}"
            );
        }
    }
}
