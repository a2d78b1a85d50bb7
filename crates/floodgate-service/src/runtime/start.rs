//! Start-up's steps before anything is served: saying where the settings come from, reading
//! the configuration, building the server over its store, giving it the lease tokens'
//! secret, and following an xDS control plane (`serve` calls them in that order).

use std::sync::Arc;

use super::{settings, ServeArgs, ServeError, Startup, MIN_ADMIN_TOKEN_BYTES};
use crate::config::xds::XdsConfig;
use crate::config::{Config, ConfigSource, XdsSource};
use crate::environment::xds::{Backoff, Xds, XdsTls, CONNECT_TIMEOUT};
use crate::service::Server;

/// Says at start-up where the settings and the configuration come from.
pub(super) fn log_startup(startup: &Startup) {
    if let Some(upstream) = &startup.upstream {
        tracing::info!(
            config = %startup.source,
            store = %match &upstream.memcache {
                Some(memcache) => format!("memcache://{}", memcache.servers.join(",")),
                None => floodgate::store::redacted(&settings::store_url(&upstream.redis)),
            },
            "envoyproxy/ratelimit's settings are in the environment: read as upstream reads them"
        );
    }
    for warning in startup.warnings() {
        tracing::warn!("{warning}");
    }
    if startup.source == crate::config::ConfigSource::Builtin {
        tracing::info!(
            "no configuration given (no --config, FLOODGATE_CONFIG or runtime directory): serving the built-in example (Stripe's four limiters with plans free, standard and pro, the `login` limit, the `example` domain)"
        );
    }
}

/// The configuration read at start.
pub(super) struct Loaded {
    /// What is served: the file's, with the command line's and the environment's settings.
    pub(super) config: Config,
    /// As the file gave it: reloads name the start-up settings the file changes against this,
    /// not against what the command line and the environment filled in.
    pub(super) file_config: Config,
    /// Whether it could not be read and the service starts without one
    /// (`FORCE_START_WITHOUT_INITIAL_CONFIG`).
    pub(super) missing: bool,
}

/// Reads the configuration `startup` names and applies its settings
/// ([`Startup::complete`]); without one, starts with none when upstream's
/// `FORCE_START_WITHOUT_INITIAL_CONFIG` says so.
pub(super) fn load(startup: &Startup, store_flag: Option<&str>) -> Result<Loaded, ServeError> {
    let start_without_config = startup
        .upstream
        .as_ref()
        .is_some_and(|up| up.behaviour.start_without_config);
    let pushed = matches!(startup.source, ConfigSource::Xds(_));
    let (file_config, missing) = match startup.source.load(&startup.overrides) {
        Ok(config) => (config, false),
        Err(error) if start_without_config || pushed => {
            if start_without_config {
                tracing::error!(%error, source = %startup.source, "STARTING WITHOUT A CONFIGURATION (FORCE_START_WITHOUT_INITIAL_CONFIG): no domain is limited, and the service is not ready until a configuration loads");
            }
            let mut config = Config {
                domains: Vec::new(),
                ..Config::base(&startup.overrides)
            };
            startup.overrides.apply(&mut config, &|_| false);
            (config, true)
        }
        Err(error) => return Err(error.into()),
    };
    Ok(Loaded {
        config: startup.complete(store_flag, file_config.clone()),
        file_config,
        missing,
    })
}

/// When the Floodgate file names a control plane (`xds:`), the configuration's source becomes
/// that control plane over the file: its domains are pushed, the rest is the file's. Until a
/// first set runs there are no domains (not ready).
pub(super) fn xds_over_file(startup: &mut Startup, loaded: &mut Loaded) {
    if let (ConfigSource::Path(path), Some(xds)) = (&startup.source, &loaded.file_config.xds) {
        startup.source = ConfigSource::Xds(XdsSource::over_file(path.clone(), xds));
        loaded.missing = true;
    }
}

/// The xDS client's settings, and whether to serve before a first set: upstream's variables
/// (`CONFIG_GRPC_XDS_*`, `FORCE_START_WITHOUT_INITIAL_CONFIG`), or the Floodgate file's `xds:`
/// with upstream's defaults for the rest.
fn xds_settings(startup: &Startup, file: Option<&XdsConfig>) -> Option<(Xds, bool)> {
    if let Some(xds) = file {
        let settings = Xds {
            server_url: xds.server.clone(),
            node_id: xds.node_id.clone(),
            node_metadata: xds.node_metadata.clone().into_iter().collect(),
            headers: Vec::new(),
            connect_timeout: CONNECT_TIMEOUT,
            tls: xds.tls.as_ref().map(|tls| XdsTls {
                client_cert: tls.cert_file.clone(),
                client_key: tls.key_file.clone(),
                server_ca: tls.ca_file.clone(),
                server_san: tls.server_name.clone(),
            }),
            backoff: Backoff::UPSTREAM,
            max_message_bytes: None,
        };
        return Some((settings, xds.start_without));
    }
    let upstream = startup.upstream.as_ref()?;
    Some((
        upstream.xds.clone()?,
        upstream.behaviour.start_without_config,
    ))
}

/// Follows the control plane when the configuration comes over xDS: the client runs on
/// `store_runtime` and hands each set of resources to `server`. Unless told to start without
/// one (`FORCE_START_WITHOUT_INITIAL_CONFIG`, `xds.start_without`), waits until a first set
/// runs, as upstream does: nothing is served before.
pub(super) fn follow_xds(
    server: &Arc<Server>,
    status: Arc<crate::xds::XdsStatus>,
    startup: &Startup,
    file: Option<&XdsConfig>,
    store_runtime: &tokio::runtime::Runtime,
) {
    let ConfigSource::Xds(source) = &startup.source else {
        return;
    };
    let Some((settings, start_without)) = xds_settings(startup, file) else {
        return;
    };
    let (first, mut running) = tokio::sync::watch::channel(false);
    let version = {
        let source = source.clone();
        move || source.version()
    };
    let server_url = settings.server_url.clone();
    store_runtime.spawn(crate::xds::follow(
        server.clone(),
        status,
        settings,
        version,
        first,
    ));
    if start_without {
        return;
    }
    tracing::info!(server = %server_url, "waiting for a first configuration from the xDS server before serving (FORCE_START_WITHOUT_INITIAL_CONFIG=true, or xds.start_without, serves at once, not ready until one runs)");
    let _ = store_runtime.block_on(running.wait_for(|running| *running));
}

/// `FLOODGATE_ADMIN_TOKEN`, when set: at least [`MIN_ADMIN_TOKEN_BYTES`] long.
pub(super) fn admin_token(startup: &Startup) -> Result<Option<String>, ServeError> {
    let token = startup
        .env()
        .string("FLOODGATE_ADMIN_TOKEN")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    match &token {
        Some(token) if token.len() < MIN_ADMIN_TOKEN_BYTES => {
            Err(ServeError::AdminToken { bytes: token.len() })
        }
        _ => Ok(token),
    }
}

/// The server for `loaded`, its store tried: a store that cannot be used must not look
/// healthy, so start-up waits for it (`store.startup_timeout`) and refuses to start unless
/// told to start without it.
pub(super) fn build(
    startup: &Startup,
    args: &ServeArgs,
    loaded: Loaded,
    admin_token: Option<String>,
    tls: &crate::service::ListenersTls,
    store_runtime: &tokio::runtime::Runtime,
) -> Result<Server, ServeError> {
    let server = {
        let _context = store_runtime.enter();
        Server::new(loaded.config, startup.source.clone(), admin_token)?
    };
    let wait = server.store().settings().startup();
    let (startup_budget, retry, start_without) = (wait.budget(), wait.retry(), wait.start_without);
    if loaded.missing {
        server.set_config_missing();
    }
    if let Err(error) =
        store_runtime.block_on(server.store().wait_until_usable(startup_budget, retry))
    {
        let url = server.store().health().url().to_string();
        if !start_without {
            return Err(ServeError::Store {
                url,
                error,
                waited: startup_budget.unwrap_or_default(),
            });
        }
        tracing::error!(
            url,
            %error,
            "STARTING WITHOUT A WORKING STORE (store.start_without: true): every stage follows its on_store_error policy (fail_open: nothing is limited) and /readyz answers 503 until the store answers"
        );
    }
    // The drop-in with upstream's settings answers as upstream does while it has nothing of
    // Floodgate's to serve.
    Ok(server
        .with_file_config(loaded.file_config)
        .with_upstream_surface(startup.upstream.is_some())
        .with_tls(tls.clone())
        .with_overrides(startup.overrides.clone())
        .with_heavy_keys(args.heavy_keys))
}

/// Gives `server` the secret its lease tokens are signed with. Services behind one load
/// balancer sign alike, so that any of them accepts the tokens another issued: with
/// FLOODGATE_LEASE_SECRET, else with the secret the nodes sharing a store share through it,
/// else (the memory store) a random one of this process.
pub(super) fn with_lease_secret(
    server: Server,
    startup: &Startup,
    store_runtime: &tokio::runtime::Runtime,
) -> Result<Server, ServeError> {
    if let Some(secret) = startup.lease_secret() {
        if secret.len() < crate::lease_token::MIN_SECRET_BYTES {
            return Err(ServeError::LeaseSecret {
                bytes: secret.len(),
            });
        }
        return Ok(server.with_lease_secret(secret));
    }
    if !server.hands_out_leases() {
        // Nothing to sign yet: the secret is read (and, by the first node, written) when a
        // reload brings a stage that hands out leases and a token is first issued.
        return Ok(server.share_lease_secret_when_needed());
    }
    match store_runtime.block_on(server.share_lease_secret()) {
        Ok(_) => Ok(server),
        Err(error) => {
            tracing::warn!(%error, "cannot read the lease tokens' shared secret from the store yet; it is read again when a token needs it");
            Ok(server.share_lease_secret_when_needed())
        }
    }
}
