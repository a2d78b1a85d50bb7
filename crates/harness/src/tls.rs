//! A test certificate authority made with `openssl` in a fresh directory, removed when
//! dropped: it signs server certificates (for the names a test chooses, right or wrong) and
//! client certificates, so that TLS tests check real chains without a CA of the machine's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A CA of the test's own, made with `openssl` in a fresh directory (removed when dropped):
/// it signs server and client certificates for whatever names a test chooses ([`TestCa::issue`]).
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
}

/// A certificate the CA signed, and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (unencrypted).
    pub key: PathBuf,
}

/// Runs `openssl` with `args` in `dir`, panicking if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is installed");
    assert!(status.success(), "openssl {args:?}");
}

impl TestCa {
    /// A new CA (`CN=floodgate-test-ca`, valid two days) in a directory of its own.
    pub fn new() -> TestCa {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "floodgate-test-ca-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-x509",
                "-days",
                "2",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-subj",
                "/CN=floodgate-test-ca",
            ],
        );
        TestCa { dir }
    }

    /// The CA's certificate (PEM), for clients and servers to trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A certificate `name` (its file stem and common name) for `subject_alt_names`, in
    /// openssl's form (`IP:127.0.0.1,DNS:localhost`), signed by the CA. Usable by servers and
    /// clients alike (no extended key usage restricts it).
    pub fn issue(&self, name: &str, subject_alt_names: &str) -> Issued {
        let (cert, key, csr) = (
            format!("{name}.crt"),
            format!("{name}.key"),
            format!("{name}.csr"),
        );
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        let extensions = format!("{name}.cnf");
        std::fs::write(
            self.dir.join(&extensions),
            format!("subjectAltName={subject_alt_names}\n"),
        )
        .expect("writes");
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &extensions,
            ],
        );
        Issued {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
