//! The one client of a paid model API, shared by `drive` and `distill`: the Responses API
//! (<https://platform.openai.com/docs/api-reference/responses>) behind the cost guard. A [`Client`] exists
//! only with approval (`--approve-live-cost`) and a key; [`Client::send`] checks each attempt against the
//! budgets before it goes out and charges the ledger for every request that may have been billed, so a
//! run never spends what was not approved and the ledger never counts less than was spent:
//! - an answer is charged by its `usage`;
//! - a request that went out and got no usable answer (a timeout, a dropped connection, an answer
//!   without `usage`) is charged at its most: every byte of the request (and the chain's earlier
//!   tokens) as input, its `max_output_tokens` as output, marked `unanswered` with the reason;
//! - a refusal (4xx, 5xx) is not billed by the API and is not charged; 429 and 5xx are retried
//!   ([`MAX_ATTEMPTS`] attempts in all), after the `Retry-After` the API asks for or an exponential
//!   backoff, each attempt within the budget.

pub mod cost;
pub mod responses;

use std::path::PathBuf;

use serde_json::Value;

pub use cost::{Ledger, LedgerEntry, Pricing, check_usd};

/// Largest Responses API answer read, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Attempts of one request answered 429 or 5xx, the first included.
pub const MAX_ATTEMPTS: u32 = 4;

/// Wait before the second attempt when the API names none; doubled for each later one.
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);

/// Longest wait honoured: an API that asks for more is not retried (the error says how long it asked).
pub const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a request to the model API was not sent, or its answer cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("no request was sent: pass --approve-live-cost to allow paid requests to {0}")]
    NotApproved(String),
    #[error("no request was sent: no API key; set OPENAI_API_KEY (or put it in .env in the working directory)")]
    NoApiKey,
    #[error("budget reached: {0}; raise the budget flag or start a new run")]
    Budget(String),
    /// The ledger cannot be read or written: what was spent cannot be counted, so nothing more is sent.
    #[error("{0}; nothing more is sent until the spending can be counted")]
    Ledger(String),
    #[error("the Responses API refused the request ({status}): {message}")]
    Api { status: u16, message: String },
    #[error("cannot reach the Responses API at {url}: {message}")]
    Transport { url: String, message: String },
    /// The request went out and no answer came back (timeout, dropped connection): it may have been
    /// billed, and the ledger counts it at its most.
    #[error(
        "no answer from the Responses API at {url} ({message}); the request may have been billed and is counted in the ledger at its most"
    )]
    Unanswered { url: String, message: String },
    #[error("unexpected Responses API answer: {0}")]
    Protocol(String),
    #[error("the response did not complete ({0}); nothing more is sent")]
    Incomplete(String),
}

/// What a [`Client`] is built from.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Base URL including the version prefix, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    /// `--approve-live-cost`: without it, no client (and no request).
    pub approve_live_cost: bool,
    /// Request timeout, seconds.
    pub timeout_secs: u64,
    /// The ledger file (JSON Lines).
    pub ledger: PathBuf,
    pub pricing: Pricing,
    /// The model every request names (recorded in the ledger).
    pub model: String,
}

/// Whose budgets a request spends: the run's and the project's (a project of `drive`, or
/// `distill:<actor>`), in USD.
#[derive(Debug, Clone, Copy)]
pub struct Account<'a> {
    pub run_id: &'a str,
    pub project: &'a str,
    pub run_budget_usd: f64,
    pub project_budget_usd: f64,
}

/// Why [`Client::send`] has no answer to use, and what its attempt left behind.
#[derive(Debug)]
pub struct SendError {
    pub error: LlmError,
    /// A request went out (it belongs in the run's request count and evidence).
    pub sent: bool,
    /// What the ledger was charged for it: a request without a usable answer, at its most.
    pub charged: Option<Charge>,
    /// The answer, when one came that cannot be used (no `usage`).
    pub answer: Option<Value>,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl From<SendError> for LlmError {
    fn from(e: SendError) -> Self {
        e.error
    }
}

/// The tokens and money one request cost (or, unanswered, may have cost).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Charge {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub usd: f64,
}

/// A Responses API client behind the cost guard.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    api_key: String,
    ledger: Ledger,
    pricing: Pricing,
    model: String,
}

/// Refuses before anything is opened when no request may be sent: without approval (naming the URL
/// requests would go to), then without a key.
///
/// # Errors
/// [`LlmError::NotApproved`], [`LlmError::NoApiKey`] (missing or blank).
pub fn preflight(base_url: &str, approve_live_cost: bool, api_key: Option<&str>) -> Result<(), LlmError> {
    if !approve_live_cost {
        return Err(LlmError::NotApproved(responses_url(base_url)));
    }
    if api_key.is_none_or(|k| k.trim().is_empty()) {
        return Err(LlmError::NoApiKey);
    }
    Ok(())
}

/// `{base_url}/responses`.
fn responses_url(base_url: &str) -> String {
    format!("{}/responses", base_url.trim_end_matches('/'))
}

impl Client {
    /// Checks approval, then the key ([`preflight`]); sends nothing.
    ///
    /// # Errors
    /// [`LlmError::NotApproved`] (naming the URL requests would go to), [`LlmError::NoApiKey`] for a
    /// missing or blank key, [`LlmError::Transport`] when no HTTP client can be built.
    pub fn new(settings: &ClientSettings) -> Result<Self, LlmError> {
        preflight(&settings.base_url, settings.approve_live_cost, settings.api_key.as_deref())?;
        let url = responses_url(&settings.base_url);
        let api_key = settings.api_key.clone().unwrap_or_default();
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(settings.timeout_secs))
            .build()
            .map_err(|e| LlmError::Transport { url: url.clone(), message: e.to_string() })?;
        Ok(Self {
            http,
            url,
            api_key,
            ledger: Ledger::new(settings.ledger.clone()),
            pricing: settings.pricing,
            model: settings.model.clone(),
        })
    }

    /// `POST {base_url}/responses`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends `body` as one paid request and charges the ledger, retrying 429 and 5xx answers (module
    /// doc). `body` must set `max_output_tokens` (the most an answer can cost). `context_tokens`: tokens
    /// the API adds to the request from earlier in its chain (`previous_response_id`), counted when an
    /// unanswered request is charged at its most.
    ///
    /// # Errors
    /// A [`SendError`] whose `error` is [`LlmError::Budget`] before an attempt the budgets no longer
    /// allow; [`LlmError::Ledger`] when the ledger cannot be read or written; [`LlmError::Api`] for a
    /// refusal (after the last attempt, or a `Retry-After` over [`MAX_RETRY_WAIT`]);
    /// [`LlmError::Transport`] when nothing reached the API; [`LlmError::Unanswered`] and
    /// [`LlmError::Protocol`] (both charged at most) when the request went out without a usable answer.
    pub async fn send(
        &self,
        body: &Value,
        account: &Account<'_>,
        context_tokens: u64,
    ) -> Result<(Value, Charge), SendError> {
        let unsent = |error| SendError { error, sent: false, charged: None, answer: None };
        let Some(output_tokens) = body["max_output_tokens"].as_u64() else {
            return Err(unsent(LlmError::Protocol(
                "a request without `max_output_tokens` has no most it can cost: nothing was sent".into(),
            )));
        };
        // a token is at least one byte of the request, so its bytes bound its input tokens
        let most_input = serde_json::to_vec(body).map_or(0, |b| b.len() as u64).saturating_add(context_tokens);
        let most_output = output_tokens;
        let mut backoff = FIRST_BACKOFF;
        let mut sent = false;
        for attempt in 1..=MAX_ATTEMPTS {
            let refused = |error| SendError { error, sent, charged: None, answer: None };
            self.ledger.check(account).map_err(refused)?;
            sent = true;
            let failure = match responses::post(&self.http, &self.url, &self.api_key, body).await {
                Ok(answer) => match responses::usage(&answer) {
                    Ok((input_tokens, output_tokens)) => {
                        let charge = self
                            .record(account, input_tokens, output_tokens, None)
                            .map_err(|error| SendError { error, sent, charged: None, answer: Some(answer.clone()) })?;
                        return Ok((answer, charge));
                    }
                    Err(error) => responses::Failure::MaybeBilled { error, answer: Some(answer) },
                },
                Err(failure) => failure,
            };
            match failure {
                responses::Failure::MaybeBilled { error, answer } => {
                    return Err(match self.record(account, most_input, most_output, Some(error.to_string())) {
                        Ok(charged) => SendError { error, sent, charged: Some(charged), answer },
                        Err(LlmError::Ledger(ledger)) => SendError {
                            error: LlmError::Ledger(format!(
                                "{ledger} (while charging a request that got no usable answer: {error})"
                            )),
                            sent,
                            charged: None,
                            answer,
                        },
                        Err(other) => SendError { error: other, sent, charged: None, answer },
                    });
                }
                responses::Failure::Refused { error, retry_after } => {
                    let retryable = matches!(&error, LlmError::Api { status, .. } if *status == 429 || *status >= 500);
                    let wait = retry_after.unwrap_or(backoff);
                    if !retryable || attempt == MAX_ATTEMPTS || wait > MAX_RETRY_WAIT {
                        let error = match (error, retry_after) {
                            (LlmError::Api { status, message }, Some(asked)) if retryable => LlmError::Api {
                                status,
                                message: format!(
                                    "{message} (the API asked to retry after {:.1} s)",
                                    asked.as_secs_f64()
                                ),
                            },
                            (error, _) => error,
                        };
                        return Err(SendError { error, sent, charged: None, answer: None });
                    }
                    tracing::warn!(attempt, wait_ms = wait.as_millis() as u64, %error, "retrying the request");
                    tokio::time::sleep(wait).await;
                    backoff = backoff.saturating_mul(2);
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    fn record(
        &self,
        account: &Account<'_>,
        input_tokens: u64,
        output_tokens: u64,
        unanswered: Option<String>,
    ) -> Result<Charge, LlmError> {
        let usd = self.pricing.cost(input_tokens, output_tokens);
        let mut entry =
            LedgerEntry::new(account.run_id, account.project, &self.model, input_tokens, output_tokens, usd);
        entry.unanswered = unanswered;
        self.ledger.record(&entry)?;
        Ok(Charge { input_tokens, output_tokens, usd })
    }
}
