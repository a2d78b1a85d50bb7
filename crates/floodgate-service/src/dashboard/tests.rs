use super::*;
use crate::config::Config;
use crate::service::Server;

fn server() -> Server {
    Server::new(Config::builtin(), None, Some("secret".into())).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn points_are_rates_since_the_previous_one() {
    let server = server();
    let first = server.dashboard(None, None).await;
    assert_eq!(first["points"].as_array().unwrap().len(), 1);
    let stages = first["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 4, "the built-in config's four limiters");

    // A point from counters read a second later: rates are the differences.
    let dashboard = Dashboard::new(16);
    let mut live = server.live().await;
    dashboard.record(&live, Nanos::from_secs(10));
    let name = live.stages[0].stats.name.as_str().to_string();
    live.stages[0].stats.decided += 30;
    live.stages[0].stats.refused += 6;
    dashboard.record(&live, Nanos::from_secs(12));
    let points = dashboard.points_after(Some(0));
    assert_eq!(points.len(), 1);
    let stage = &points[0].stages[&name];
    assert_eq!((stage.decisions, stage.refusals), (15.0, 3.0));
    assert_eq!(points[0].seq, 1);
    assert!(!dashboard.due(Nanos::from_millis(12_500)));
    assert!(dashboard.due(Nanos::from_secs(13)));
    // A second reading a moment after the first (the sampler and a page both found a point
    // due) takes no point.
    assert!(!dashboard.record(&live, Nanos::from_millis(12_001)));
    assert_eq!(dashboard.points_after(None).len(), 2);
}

/// A reload's stages go on counting where the previous configuration's left off: the point
/// after a reload is the difference, and the totals never go back.
#[tokio::test(flavor = "current_thread")]
async fn a_reload_keeps_counting() {
    let server = server();
    let dashboard = Dashboard::new(0);
    let request = crate::service::EvaluateRequest {
        user: "alice".into(),
        ..Default::default()
    };
    for _ in 0..7 {
        server.evaluate(&request).await.unwrap();
    }
    dashboard.record(&server.live().await, Nanos::from_secs(1));
    server.reload(crate::service::Trigger::Admin).unwrap();
    for _ in 0..3 {
        server.evaluate(&request).await.unwrap();
    }
    let live = server.live().await;
    assert_eq!(live.stages[0].stats.decided, 10, "{:?}", live.stages[0]);
    dashboard.record(&live, Nanos::from_secs(2));
    let point = dashboard.points_after(Some(0)).pop().unwrap();
    assert_eq!(point.stages["request_rate"].decisions, 3.0, "{point:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn the_history_is_bounded() {
    let server = server();
    let dashboard = Dashboard::new(0);
    let live = server.live().await;
    for s in 0..(HISTORY as u64 + 50) {
        dashboard.record(&live, Nanos::from_secs(s));
    }
    let points = dashboard.points_after(None);
    assert_eq!(points.len(), HISTORY);
    assert_eq!(points[0].seq, 50);
}

#[tokio::test(flavor = "current_thread")]
async fn keys_are_hashed_unless_shown_in_full() {
    let live = server().live().await;
    let dashboard = Dashboard::new(16);
    for _ in 0..3 {
        dashboard.count_key(|k| k.push_str("sk_live_secret"));
    }
    dashboard.count_key(|k| k.push_str("other"));
    dashboard.record(&live, Nanos::from_secs(1));
    let (plain, counted) = dashboard.heavy_keys(true);
    assert_eq!(counted, 4);
    assert_eq!(
        (plain[0].key.as_str(), plain[0].count),
        ("sk_live_secret", 3)
    );
    let (hashed, _) = dashboard.heavy_keys(false);
    assert!(hashed[0].key.starts_with('#') && hashed[0].key.len() == 9);
    assert!(hashed.iter().all(|c| !c.key.contains("secret")));
    assert_ne!(hashed[0].key, hashed[1].key);
}

#[tokio::test(flavor = "current_thread")]
async fn the_key_window_turns_every_minute_keeping_the_previous_one() {
    let server = server();
    let live = server.live().await;
    let dashboard = Dashboard::new(16);
    dashboard.record(&live, Nanos::from_secs(0));
    dashboard.count_key(|k| k.push_str("early"));
    dashboard.record(&live, Nanos::from_secs(60));
    dashboard.count_key(|k| k.push_str("late"));
    dashboard.record(&live, Nanos::from_secs(61));
    let keys: Vec<String> = dashboard
        .heavy_keys(true)
        .0
        .into_iter()
        .map(|c| c.key)
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    dashboard.record(&live, Nanos::from_secs(120));
    let keys: Vec<String> = dashboard
        .heavy_keys(true)
        .0
        .into_iter()
        .map(|c| c.key)
        .collect();
    assert_eq!(keys, ["late"]);
}

#[tokio::test(flavor = "current_thread")]
async fn the_dashboard_counts_what_the_service_decides() {
    let server = server();
    for _ in 0..5 {
        server.check("login", "10.0.0.1", 1).await.unwrap();
    }
    let answer = server.dashboard(None, Some("secret")).await;
    assert_eq!(answer["heavy_keys"]["plain"], true);
    let keys = answer["heavy_keys"]["keys"].as_array().unwrap();
    assert!(
        keys.iter()
            .any(|k| k["key"] == "limit login: 10.0.0.1" && k["count"] == 5),
        "{keys:?}"
    );
    let anonymous = server.dashboard(None, None).await;
    assert_eq!(anonymous["heavy_keys"]["plain"], false);
    assert!(!anonymous.to_string().contains("10.0.0.1"));
}
