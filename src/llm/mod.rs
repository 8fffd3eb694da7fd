//! The one client of a paid model API, shared by `drive` and `distill`: the Responses API
//! (<https://platform.openai.com/docs/api-reference/responses>) behind the cost guard. A [`Client`] exists
//! only with approval (`--approve-live-cost`) and a key; each request is checked against the budgets
//! before it is sent ([`Client::check_budget`]) and charged to the ledger once answered
//! ([`Client::charge`]), so a run never spends what was not approved.

pub mod cost;
pub mod responses;

use std::path::PathBuf;

use serde_json::Value;

pub use cost::{Ledger, LedgerEntry, Pricing, check_usd};

/// Largest Responses API answer read, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Why a request to the model API was not sent, or its answer cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("no request was sent: pass --approve-live-cost to allow paid requests to {0}")]
    NotApproved(String),
    #[error("no request was sent: no API key; set OPENAI_API_KEY (or put it in .env in the working directory)")]
    NoApiKey,
    #[error("budget reached: {0}; raise the budget flag or start a new run")]
    Budget(String),
    #[error("the Responses API refused the request ({status}): {message}")]
    Api { status: u16, message: String },
    #[error("cannot reach the Responses API at {url}: {message}")]
    Transport { url: String, message: String },
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

/// The tokens and money one answered request cost.
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

    /// Refuses when `run_id` has spent `run_budget` USD or `project` has spent `project_budget` USD (by
    /// the ledger), or the ledger cannot be read.
    ///
    /// # Errors
    /// [`LlmError::Budget`] with the reason.
    pub fn check_budget(
        &self,
        run_id: &str,
        project: &str,
        run_budget: f64,
        project_budget: f64,
    ) -> Result<(), LlmError> {
        self.ledger.check(run_id, project, run_budget, project_budget).map_err(LlmError::Budget)
    }

    /// Sends one request ([`responses::post`]).
    ///
    /// # Errors
    /// As [`responses::post`].
    pub async fn post(&self, body: &Value) -> Result<Value, LlmError> {
        responses::post(&self.http, &self.url, &self.api_key, body).await
    }

    /// Reads the answer's `usage`, prices it and appends it to the ledger under `run_id` and `project`.
    ///
    /// # Errors
    /// [`LlmError::Protocol`] without a usable `usage` (the guard cannot count it: the caller stops),
    /// [`LlmError::Budget`] when the ledger cannot be written.
    pub fn charge(&self, response: &Value, run_id: &str, project: &str) -> Result<Charge, LlmError> {
        let (input_tokens, output_tokens) = responses::usage(response)?;
        let usd = self.pricing.cost(input_tokens, output_tokens);
        self.ledger
            .record(&LedgerEntry::new(run_id, project, &self.model, input_tokens, output_tokens, usd))
            .map_err(LlmError::Budget)?;
        Ok(Charge { input_tokens, output_tokens, usd })
    }
}
