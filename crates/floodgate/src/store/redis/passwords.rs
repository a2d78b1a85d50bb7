//! Passwords in Redis URLs, scrubbed from every error message the client gives, so that they
//! never reach a log or a response (URLs themselves are shown by the one redactor,
//! [`crate::store::url::redacted`]).

use crate::store::url::is_secret_parameter;
pub use crate::store::url::redacted;

/// The passwords in `url`'s user information (`scheme://[user]:password@…`) and query
/// (`?pass=…`), as written and percent-decoded; empty when there is none.
pub(super) fn secrets(url: &str) -> Vec<String> {
    if let Some((before, query)) = url.split_once('?') {
        let mut found = secrets(before);
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=') {
                if is_secret_parameter(name) && !value.is_empty() {
                    found.push(value.to_string());
                    let decoded = percent_decoded(value);
                    if decoded != value {
                        found.push(decoded);
                    }
                }
            }
        }
        found.sort_by_key(|s| std::cmp::Reverse(s.len()));
        return found;
    }
    let Some((_, rest)) = url.split_once("://") else {
        return Vec::new();
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let Some((user_info, _)) = authority.rsplit_once('@') else {
        return Vec::new();
    };
    let Some((_, password)) = user_info.split_once(':') else {
        return Vec::new();
    };
    let mut secrets = vec![password.to_string()];
    let decoded = percent_decoded(password);
    if decoded != password {
        secrets.push(decoded);
    }
    secrets.retain(|s| !s.is_empty());
    // Longest first, so that a secret containing another is scrubbed whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
}

/// `%XX` escapes decoded (invalid ones kept as written).
pub(super) fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{redacted, secrets};

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redacted("redis://127.0.0.1:6380/2"),
            "redis://127.0.0.1:6380/2"
        );
        assert_eq!(redacted("redis://u:s3cret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redacted("redis://:s3cret@h:1"), "redis://:***@h:1");
        assert_eq!(redacted("redis://u@h:1"), "redis://u@h:1");
        assert_eq!(redacted("redis://u:p@ss:w@h:1"), "redis://u:***@h:1");
        assert_eq!(redacted("not a url"), "not a url");
    }

    #[test]
    fn the_passwords_to_scrub_are_found_as_written_and_decoded() {
        assert_eq!(secrets("redis://u:p%40ss@h:1/0"), ["p%40ss", "p@ss"]);
        assert_eq!(secrets("redis-cluster://:pw@h1:1,h2:2"), ["pw"]);
        assert_eq!(secrets("rediss://u@h:1"), Vec::<String>::new());
        assert_eq!(secrets("redis://h:1"), Vec::<String>::new());
    }
}
