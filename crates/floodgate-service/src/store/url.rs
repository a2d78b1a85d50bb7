//! `store.url` read with the core's one parser of store URLs ([`StoreUrl::parse`]), and the
//! password of `store.password_env` put into a Redis URL's user information. Errors name the
//! field (`store.url`, `store.password_env`, `store.nodes`) and show the URL with every
//! password redacted.

pub use floodgate::store::StoreUrl;

use crate::config::{ConfigFileError, StoreConfig, StoreSettings};

/// `config.url` (`memory` when absent), checked with the rest of the section, with the
/// password of `store.password_env` (read with `env`) put in.
pub fn from_config(
    config: &StoreConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StoreUrl, ConfigFileError> {
    from_settings(config, &config.settings()?, env)
}

/// [`from_config`] for a section already typed as `settings`.
pub fn from_settings(
    config: &StoreConfig,
    settings: &StoreSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StoreUrl, ConfigFileError> {
    put_password(config.store_url()?, settings.password_env(), env)
}

/// The Redis URL `written` with the password of `password_env` (read with `env`) put in, as
/// [`from_settings`] puts it: the URL to connect with, never shown.
pub fn with_password(
    written: &str,
    password_env: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigFileError> {
    let url =
        StoreUrl::parse(written).map_err(|e| ConfigFileError::from_config_error("store", e))?;
    match put_password(url, password_env, env)? {
        StoreUrl::Redis { url, .. } => Ok(url),
        other => Err(ConfigFileError::invalid(
            "store.password_env",
            format!("only a Redis URL takes a password, not {}", other.shown()),
        )),
    }
}

/// `url` with the password of the environment variable `name` (read with `env`) put in;
/// `url` itself without a `name`.
fn put_password(
    url: StoreUrl,
    name: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StoreUrl, ConfigFileError> {
    let Some(name) = name else {
        return Ok(url);
    };
    let invalid = |why: String| ConfigFileError::invalid("store.password_env", why);
    let password = env(name).filter(|p| !p.is_empty()).ok_or_else(|| {
        invalid(format!(
            "`{name}`: the environment variable is not set (or empty)"
        ))
    })?;
    url.with_password(&password).map_err(|e| match e {
        floodgate::ConfigError::Invalid { value, reason, .. } => {
            invalid(format!("`{name}`: {reason} ({value})"))
        }
        other => invalid(format!("`{name}`: {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(
        url: &str,
        password_env: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<StoreUrl, String> {
        let mut config = StoreConfig::at(url);
        if let Some(name) = password_env {
            config.set("password_env", name);
        }
        from_config(&config, |name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_password_comes_from_the_environment_and_is_never_shown() {
        let env = [("REDIS_PW", "s3cr:et@/x")];
        let u = url("redis://10.0.0.1:6380/2", Some("REDIS_PW"), &env).unwrap();
        let StoreUrl::Redis { url: full, .. } = &u else {
            panic!("{u:?}")
        };
        assert_eq!(full, "redis://:s3cr%3Aet%40%2Fx@10.0.0.1:6380/2");
        assert_eq!(u.shown(), "redis://:***@10.0.0.1:6380/2");
        assert!(!format!("{u:?}").contains("s3cr"));
        let u = url("redis://app@h:1", Some("REDIS_PW"), &env).unwrap();
        assert_eq!(u.shown(), "redis://app:***@h:1");
        let u = url("redis-cluster://h1:1,h2:2", Some("REDIS_PW"), &env).unwrap();
        assert_eq!(u.kind(), "redis-cluster");
        assert_eq!(u.shown(), "redis-cluster://:***@h1:1,h2:2");
        let u = url(
            "rediss-sentinel://s1:1,s2:2/mymaster/2?sentinel_pass=sent1nel",
            Some("REDIS_PW"),
            &env,
        )
        .unwrap();
        assert_eq!(
            u.shown(),
            "rediss-sentinel://:***@s1:1,s2:2/mymaster/2?sentinel_pass=***"
        );
        assert!(!format!("{u:?}").contains("sent1nel"));
        let u = url("rediss-cluster://h1:1,h2:2", None, &env).unwrap();
        assert!(matches!(
            u,
            StoreUrl::Redis {
                topology: floodgate::store::Topology::Cluster,
                ..
            }
        ));
    }

    #[test]
    fn bad_urls_and_settings_name_the_field_and_hide_passwords() {
        let cases: [(&str, Option<&str>, &str, &str); 9] = [
            (
                "redis://h:1",
                Some("MISSING"),
                "store.password_env",
                "`MISSING`",
            ),
            (
                "redis://u:hunter2@h:1",
                Some("REDIS_PW"),
                "store.password_env",
                "already",
            ),
            ("mongodb://h:1", None, "store.url", "mongodb://h:1"),
            (
                "redis-sentinel://u:hunter2@h:1",
                None,
                "store.url",
                "names no master",
            ),
            (
                "rediss-sentinel://:hunter2@h:1,h2/m",
                None,
                "store.url",
                "`h2` in",
            ),
            ("redis-cluster://h1:1,h2", None, "store.url", "`h2` in"),
            ("redis://h1:1,h2:2", None, "store.url", "redis-cluster://"),
            ("redis://", None, "store.url", "no host"),
            (
                "redis-cluster://:hunter2@h:1/3",
                None,
                "store.url",
                "database 0",
            ),
        ];
        for (u, env_name, field, says) in cases {
            let e = url(u, env_name, &[("REDIS_PW", "pw")]).unwrap_err();
            assert!(e.contains(field) && e.contains(says), "{u}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let config = StoreConfig::at("redis://h:1").with("nodes", 0);
        let e = from_config(&config, |_| None).unwrap_err().to_string();
        assert!(e.contains("store.nodes") && e.contains('0'), "{e}");
        assert_eq!(url("memory", None, &[]).unwrap(), StoreUrl::Memory);
        let socket = url("unix:///run/redis.sock?pass=hunter2", None, &[]).unwrap();
        assert_eq!(socket.kind(), "redis");
        assert_eq!(socket.shown(), "unix:///run/redis.sock?pass=***");
        assert!(url("unix://relative", None, &[])
            .unwrap_err()
            .contains("socket"));
    }
}
