//! Sending one Responses API request (`POST {base_url}/responses`) and reading what the cost guard and
//! the callers need from the answer: `usage`, `status`, and the message text. Shared by `drive` and
//! `distill`.

use std::time::Duration;

use serde_json::Value;

use super::{LlmError, MAX_RESPONSE_BYTES};

/// Why [`post`] has no answer to use, split by whether the API may bill it.
#[derive(Debug)]
pub enum Failure {
    /// Not billed: nothing reached the API ([`LlmError::Transport`]), or it answered with an error status
    /// ([`LlmError::Api`]), possibly naming when to retry (`Retry-After`, RFC 9110 §10.2.3, or OpenAI's
    /// `retry-after-ms`).
    Refused { error: LlmError, retry_after: Option<Duration> },
    /// The request went out and no usable answer came back ([`LlmError::Unanswered`] after a timeout or
    /// a dropped connection, [`LlmError::Protocol`] for an oversized or non-JSON 2xx body, or a 2xx
    /// without `usage`, which is kept in `answer`).
    MaybeBilled { error: LlmError, answer: Option<Value> },
}

/// Posts `body` with the bearer key and returns the JSON answer (read up to [`MAX_RESPONSE_BYTES`]).
///
/// # Errors
/// A [`Failure`] that says whether the request may have been billed.
pub async fn post(client: &reqwest::Client, url: &str, api_key: &str, body: &Value) -> Result<Value, Failure> {
    let unanswered = |e: reqwest::Error| {
        let message = if e.is_timeout() { format!("timed out: {e}") } else { e.to_string() };
        LlmError::Unanswered { url: url.to_string(), message }
    };
    let response = client.post(url).bearer_auth(api_key).json(body).send().await.map_err(|e| {
        if e.is_connect() || e.is_builder() {
            Failure::Refused {
                error: LlmError::Transport { url: url.to_string(), message: e.to_string() },
                retry_after: None,
            }
        } else {
            Failure::MaybeBilled { error: unanswered(e), answer: None }
        }
    })?;
    let status = response.status();
    let retry_after = retry_after(response.headers());
    // Read at most MAX_RESPONSE_BYTES: a runaway answer must not take the memory (or the evidence) with it.
    let mut response = response;
    let mut bytes = Vec::new();
    // an error status is not billed, however its body ends
    let failed = |error: LlmError| {
        if status.is_success() {
            Failure::MaybeBilled { error, answer: None }
        } else {
            let message = format!("{error} (after status {status})");
            Failure::Refused { error: LlmError::Api { status: status.as_u16(), message }, retry_after }
        }
    };
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return Err(failed(unanswered(e))),
        }
        if bytes.len() > MAX_RESPONSE_BYTES {
            return Err(failed(LlmError::Protocol(format!("a response over {MAX_RESPONSE_BYTES} bytes"))));
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        let message =
            value["error"]["message"].as_str().map_or_else(|| text.chars().take(500).collect(), str::to_string);
        return Err(Failure::Refused { error: LlmError::Api { status: status.as_u16(), message }, retry_after });
    }
    if value.is_null() {
        return Err(Failure::MaybeBilled {
            error: LlmError::Protocol(format!("the body is not JSON: {}", text.chars().take(200).collect::<String>())),
            answer: None,
        });
    }
    Ok(value)
}

/// The wait an answer asks for: `retry-after-ms` (milliseconds), else `Retry-After` in seconds or as
/// an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) =
        header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(std::time::SystemTime::now()).unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (reqwest::header::HeaderName::from_static(k), HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        assert_eq!(retry_after(&headers(&[("retry-after", "7")])), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers(&[("retry-after", "1.5")])), Some(Duration::from_millis(1500)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let wait = retry_after(&headers(&[("retry-after", &later)])).unwrap();
        assert!(wait > Duration::from_secs(28) && wait <= Duration::from_secs(30), "{wait:?}");
        assert_eq!(retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")])), None);
        // a huge wait is read as a day (the client then refuses to wait), never an overflow
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "1e30")])), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_after(&headers(&[("retry-after", "1e30")])), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
