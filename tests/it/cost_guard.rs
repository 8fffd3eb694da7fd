//! The cost guard's client (`astra_mcp::llm::Client::send`) against a local mock of the Responses API:
//! what it retries and how long it waits, and that the ledger counts every request that may have been
//! billed (a timeout at its most, marked) and says when it cannot count.

use std::time::{Duration, Instant};

use astra_mcp::llm::{Account, Client, Ledger, LlmError, MAX_ATTEMPTS};
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::support::{MockModel, ModelStep, client_settings};

fn answered() -> ModelStep {
    Box::new(|_| {
        ResponseTemplate::new(200).set_body_json(json!({"id": "resp_1", "status": "completed", "output": [],
            "usage": {"input_tokens": 1000, "output_tokens": 100}}))
    })
}

fn refused(status: u16, retry_after: Option<&'static str>) -> ModelStep {
    Box::new(move |_| {
        let template =
            ResponseTemplate::new(status).set_body_json(json!({"error": {"message": format!("busy {status}")}}));
        match retry_after {
            Some(seconds) => template.insert_header("retry-after", seconds),
            None => template,
        }
    })
}

fn body() -> Value {
    json!({"model": "gpt-6-astra", "input": "say hi", "max_output_tokens": 500})
}

const ACCOUNT: Account<'static> =
    Account { run_id: "run-1", project: "proj", run_budget_usd: 1.0, project_budget_usd: 5.0 };

#[tokio::test]
async fn a_429_is_retried_after_the_wait_it_asks_for_and_only_the_answer_is_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mocked = MockModel::start(vec![refused(429, Some("1")), answered()]).await;
    let settings = client_settings(mocked.base_url(), dir.path());
    let client = Client::new(&settings).unwrap();
    let started = Instant::now();
    let (answer, charge) = client.send(&body(), &ACCOUNT, 0).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1), "waited {:?}", started.elapsed());
    assert_eq!(answer["id"], "resp_1");
    assert_eq!((charge.input_tokens, charge.output_tokens), (1000, 100));
    assert_eq!(mocked.requests().len(), 2);
    let entries = Ledger::new(settings.ledger.clone()).entries().unwrap();
    assert_eq!(entries.len(), 1, "a refusal is not billed: {entries:?}");
    assert!((entries[0].usd - (1000.0 * 10.0 + 100.0 * 50.0) / 1e6).abs() < 1e-12);
    assert_eq!(entries[0].unanswered, None);
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times_and_client_errors_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let steps = (0..MAX_ATTEMPTS + 1).map(|_| refused(503, Some("0"))).collect();
    let mocked = MockModel::start(steps).await;
    let client = Client::new(&client_settings(mocked.base_url(), dir.path())).unwrap();
    let error = client.send(&body(), &ACCOUNT, 0).await.unwrap_err().error;
    assert!(matches!(&error, LlmError::Api { status: 503, .. }), "{error}");
    assert_eq!(mocked.requests().len(), MAX_ATTEMPTS as usize);

    let mocked = MockModel::start(vec![refused(400, None), answered()]).await;
    let client = Client::new(&client_settings(mocked.base_url(), dir.path())).unwrap();
    let error = client.send(&body(), &ACCOUNT, 0).await.unwrap_err().error;
    assert!(matches!(&error, LlmError::Api { status: 400, .. }), "{error}");
    assert_eq!(mocked.requests().len(), 1, "a 400 is the request's fault: sending it again would not help");

    // asked to wait longer than the client will: stop at once and say how long the API asked for
    let mocked = MockModel::start(vec![refused(429, Some("600")), answered()]).await;
    let client = Client::new(&client_settings(mocked.base_url(), dir.path())).unwrap();
    let error = client.send(&body(), &ACCOUNT, 0).await.unwrap_err().error.to_string();
    assert!(error.contains("retry after 600.0 s"), "{error}");
    assert_eq!(mocked.requests().len(), 1);
    assert!(Ledger::new(dir.path().join("ledger.jsonl")).entries().unwrap().is_empty(), "nothing was billed");
}

#[tokio::test]
async fn a_request_that_times_out_is_charged_at_its_most_and_counts_against_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let slow: ModelStep = Box::new(|_| {
        ResponseTemplate::new(200)
            .set_delay(Duration::from_secs(3))
            .set_body_json(json!({"id": "late", "usage": {"input_tokens": 1, "output_tokens": 1}}))
    });
    let mocked = MockModel::start(vec![slow, answered()]).await;
    let mut settings = client_settings(mocked.base_url(), dir.path());
    settings.timeout_secs = 1;
    let client = Client::new(&settings).unwrap();
    let failure = client.send(&body(), &ACCOUNT, 40).await.unwrap_err();
    assert!(failure.sent);
    let charged = failure.charged.expect("charged at its most");
    let error = failure.error;
    assert!(matches!(&error, LlmError::Unanswered { .. }), "{error}");
    assert!(error.to_string().contains("timed out"), "{error}");
    assert_eq!(mocked.requests().len(), 1, "a request that may have been billed is not sent again");

    let entries = Ledger::new(settings.ledger.clone()).entries().unwrap();
    assert_eq!(entries.len(), 1);
    let body_bytes = serde_json::to_vec(&body()).unwrap().len() as u64;
    assert_eq!((entries[0].input_tokens, entries[0].output_tokens), (body_bytes + 40, 500));
    assert!(entries[0].unanswered.as_deref().unwrap().contains("timed out"), "{:?}", entries[0]);
    let most = (body_bytes + 40) as f64 * 10.0 / 1e6 + 500.0 * 50.0 / 1e6;
    assert!((entries[0].usd - most).abs() < 1e-12, "{} vs {most}", entries[0].usd);
    assert!((charged.usd - most).abs() < 1e-12, "the caller learns the charge too: {charged:?}");

    // a run whose budget the unanswered request used up sends nothing more
    let tight = Account { run_budget_usd: most, ..ACCOUNT };
    let refused = client.send(&body(), &tight, 0).await.unwrap_err();
    assert!(!refused.sent, "a refused request is not sent");
    assert!(matches!(&refused.error, LlmError::Budget(reason) if reason.contains("run `run-1`")), "{refused}");
    assert_eq!(mocked.requests().len(), 1);
}

#[tokio::test]
async fn a_ledger_that_cannot_be_read_is_said_as_such_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mocked = MockModel::start(vec![answered()]).await;
    let mut settings = client_settings(mocked.base_url(), dir.path());
    settings.ledger = dir.path().to_path_buf(); // a directory: unreadable as a ledger
    let client = Client::new(&settings).unwrap();
    let error = client.send(&body(), &ACCOUNT, 0).await.unwrap_err().error;
    assert!(matches!(&error, LlmError::Ledger(_)), "{error}");
    let message = error.to_string();
    assert!(message.contains("cost ledger") && !message.contains("budget reached"), "{message}");
    assert!(mocked.requests().is_empty());

    // a request that cannot be bounded is not sent either
    let ledger = tempfile::tempdir().unwrap();
    let client = Client::new(&client_settings(mocked.base_url(), ledger.path())).unwrap();
    let unbounded = client.send(&json!({"model": "m", "input": "hi"}), &ACCOUNT, 0).await.unwrap_err();
    assert!(!unbounded.sent && unbounded.error.to_string().contains("max_output_tokens"), "{unbounded}");
    assert!(mocked.requests().is_empty());
}
