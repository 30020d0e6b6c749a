//! A test passes or fails on its own inputs: the Pushgateways the tests and
//! scripts start load nothing another job or an earlier demo pushed, and
//! metric lookups name their job.

use crate::support::pushgateway::{self, value};

#[tokio::test]
async fn a_test_pushgateway_keeps_its_groups_in_memory_only() {
    let gw = pushgateway::start().await;
    let status: serde_json::Value = reqwest::get(format!("{}/api/v1/status", gw.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        status["data"]["flags"]["persistence.file"], "",
        "Debian's default file would load groups pushed by anything else: {status}"
    );
}

#[test]
fn the_scripts_pushgateway_keeps_its_groups_in_memory_only() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(
            r#". scripts/lib.sh && start_pushgateway /dev/null &&
               python3 -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/status"))["data"]["flags"]["persistence.file"] == "")' "$PUSHGATEWAY_URL";
               kill "$PUSHGATEWAY_PID""#,
        )
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "True",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_metric_lookup_reads_its_own_jobs_group_only() {
    let scraped = r#"# TYPE stripe_reconciler_run_outcome gauge
stripe_reconciler_run_outcome{instance="",job="someone-elses-job",outcome="interrupted"} 1
stripe_reconciler_run_outcome{instance="",job="payments-vs-stripe",outcome="interrupted"} 0
"#;
    assert_eq!(
        value(
            scraped,
            "stripe_reconciler_run_outcome",
            &[("job", "payments-vs-stripe"), ("outcome", "interrupted")]
        ),
        Some(0.0)
    );
}

#[test]
#[should_panic(expected = "select stripe_reconciler_lag_seconds by its job")]
fn a_metric_lookup_without_its_job_is_refused() {
    value(
        "stripe_reconciler_lag_seconds 1\n",
        "stripe_reconciler_lag_seconds",
        &[],
    );
}
