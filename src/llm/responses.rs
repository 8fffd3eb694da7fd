//! Sending one Responses API request (`POST {base_url}/responses`) and reading what the cost guard and
//! the callers need from the answer: `usage`, `status`, and the message text. Shared by `drive` and
//! `distill`.

use serde_json::Value;

use super::{LlmError, MAX_RESPONSE_BYTES};

/// Posts `body` with the bearer key and returns the JSON answer (read up to [`MAX_RESPONSE_BYTES`]).
///
/// # Errors
/// [`LlmError::Transport`] when the server cannot be reached, [`LlmError::Api`] for a non-2xx
/// answer (with the API's `error.message`), [`LlmError::Protocol`] for an oversized or non-JSON body.
pub async fn post(client: &reqwest::Client, url: &str, api_key: &str, body: &Value) -> Result<Value, LlmError> {
    let response = client
        .post(url)
        .bearer_auth(api_key)
        .json(body)
        .send()
        .await
        .map_err(|e| LlmError::Transport { url: url.to_string(), message: e.to_string() })?;
    let status = response.status();
    // Read at most MAX_RESPONSE_BYTES: a runaway answer must not take the memory (or the evidence) with it.
    let mut response = response;
    let mut bytes = Vec::new();
    while let Some(chunk) =
        response.chunk().await.map_err(|e| LlmError::Transport { url: url.to_string(), message: e.to_string() })?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_RESPONSE_BYTES {
            return Err(LlmError::Protocol(format!("a response over {MAX_RESPONSE_BYTES} bytes")));
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        let message =
            value["error"]["message"].as_str().map_or_else(|| text.chars().take(500).collect(), str::to_string);
        return Err(LlmError::Api { status: status.as_u16(), message });
    }
    if value.is_null() {
        return Err(LlmError::Protocol(format!(
            "the body is not JSON: {}",
            text.chars().take(200).collect::<String>()
        )));
    }
    Ok(value)
}

/// `usage.input_tokens` and `usage.output_tokens`.
///
/// # Errors
/// [`LlmError::Protocol`] when either is missing or not a plausible token count (0 to 10^9).
pub fn usage(response: &Value) -> Result<(u64, u64), LlmError> {
    let get = |k: &str| {
        response["usage"][k].as_u64().filter(|n| *n <= 1_000_000_000).ok_or_else(|| {
            LlmError::Protocol(format!("a response without a usable `usage.{k}`: the cost guard cannot count it"))
        })
    };
    Ok((get("input_tokens")?, get("output_tokens")?))
}

/// `Err(LlmError::Incomplete)` unless the response's `status` is `completed` (or absent).
pub fn check_completed(response: &Value) -> Result<(), LlmError> {
    if let Some(status) = response["status"].as_str().filter(|s| *s != "completed") {
        let reason = response["incomplete_details"]["reason"]
            .as_str()
            .or_else(|| response["error"]["message"].as_str())
            .unwrap_or("no reason given");
        return Err(LlmError::Incomplete(format!("status `{status}`: {reason}")));
    }
    Ok(())
}

/// The text of the response's `message` items (`output_text` parts), joined by newlines.
pub fn output_text(response: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for item in response["output"].as_array().into_iter().flatten().filter(|i| i["type"] == "message") {
        for part in item["content"].as_array().into_iter().flatten() {
            match (part["type"].as_str(), part["text"].as_str(), part["refusal"].as_str()) {
                (Some("output_text"), Some(text), _) => parts.push(text.to_string()),
                (Some("refusal"), _, Some(refusal)) => parts.push(format!("Refusal: {refusal}")),
                _ => {}
            }
        }
    }
    parts.join("\n")
}
