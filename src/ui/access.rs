//! Who a browser acts for (docs/ui.md, "Who sees what"). A browser holds a session cookie
//! (`HttpOnly`, `SameSite=Strict`) that maps, in this process, to one [`Scope`] and one CSRF token; every
//! page acts for that scope exactly as the tools do for a bearer token. A session starts:
//!
//! - by itself, for the server's own actor, when the listener has no bearer tokens and no login code
//!   (`serve --http` on loopback without tokens: the same trust as `/mcp` there);
//! - from the login form, which takes a bearer token once (the token is not kept);
//! - from the one-time code in the URL `astra-mcp ui` prints (used once, then void).
//!
//! A mutation needs the session, its CSRF token in the form, and an `Origin` equal to the page's own
//! (when the browser sends one): a page of another site, even on loopback, cannot make one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use sha2::{Digest, Sha256};

use crate::domain::Scope;

/// The session cookie's name.
pub const COOKIE: &str = "astra_session";
/// A session unused this long ends.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// Live sessions kept at most; past it the least recently used one ends.
pub const MAX_SESSIONS: usize = 1000;

/// Finds the identity a bearer token maps to (`None`: not one of the listener's tokens).
pub type TokenLookup = dyn Fn(&str) -> Option<Scope> + Send + Sync;

/// How browsers log in to one listener.
pub struct Access {
    default: Scope,
    /// Every browser acts for `default` without logging in.
    open: bool,
    /// The code of `astra-mcp ui`'s URL, until it is used.
    one_time_code: Mutex<Option<String>>,
    /// `None`: the listener has no bearer tokens.
    tokens: Option<Box<TokenLookup>>,
    sessions: Mutex<HashMap<String, Session>>,
}

struct Session {
    scope: Scope,
    csrf: String,
    last_seen: Instant,
}

/// The identity a request acts for, with the CSRF token its forms carry.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub scope: Scope,
    pub csrf: String,
}

/// Why a request may not act.
#[derive(Debug)]
pub enum Denied {
    /// No session: the browser must log in first.
    LogIn,
    /// A mutation without the session's CSRF token, or from another origin (403).
    Forbidden(&'static str),
}

/// 256 random bits as hex (two v4 UUIDs: 244 random bits from the OS generator).
fn secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Compares two secrets by their SHA-256, so the time taken says nothing about where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes()) == Sha256::digest(b.as_bytes())
}

impl Access {
    /// `open`: browsers act for `default` without logging in; `one_time_code`: the code of a URL that
    /// logs in as `default` once; `tokens`: the bearer tokens the login form accepts.
    pub fn new(default: Scope, open: bool, one_time_code: Option<String>, tokens: Option<Box<TokenLookup>>) -> Self {
        Self { default, open, one_time_code: Mutex::new(one_time_code), tokens, sessions: Mutex::default() }
    }

    /// A fresh one-time code for [`Access::new`].
    pub fn new_code() -> String {
        secret()
    }

    /// Whether the login form takes bearer tokens.
    pub fn takes_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    fn start(&self, scope: Scope, jar: CookieJar) -> (Viewer, CookieJar) {
        let id = secret();
        let viewer = Viewer { scope: scope.clone(), csrf: secret() };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.last_seen.elapsed() < SESSION_IDLE);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), Session { scope, csrf: viewer.csrf.clone(), last_seen: Instant::now() });
        let cookie = Cookie::build((COOKIE, id)).http_only(true).same_site(SameSite::Strict).path("/").build();
        (viewer, jar.add(cookie))
    }

    fn current(&self, jar: &CookieJar) -> Option<Viewer> {
        let id = jar.get(COOKIE)?.value().to_string();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let session = sessions.get_mut(&id)?;
        if session.last_seen.elapsed() >= SESSION_IDLE {
            sessions.remove(&id);
            return None;
        }
        session.last_seen = Instant::now();
        Some(Viewer { scope: session.scope.clone(), csrf: session.csrf.clone() })
    }

    /// The viewer of a page: its session's, or a new session's when the listener is open.
    ///
    /// # Errors
    /// [`Denied::LogIn`] when there is no session and logging in is needed.
    pub fn viewer(&self, jar: CookieJar) -> Result<(Viewer, CookieJar), Denied> {
        if let Some(viewer) = self.current(&jar) {
            return Ok((viewer, jar));
        }
        if self.open {
            return Ok(self.start(self.default.clone(), jar));
        }
        Err(Denied::LogIn)
    }

    /// The viewer of a mutation: its session, its CSRF token (`csrf` from the form) and its origin.
    ///
    /// # Errors
    /// [`Denied::LogIn`] without a session; [`Denied::Forbidden`] for a wrong CSRF token or origin.
    pub fn mutation(&self, jar: &CookieJar, headers: &HeaderMap, csrf: &str) -> Result<Viewer, Denied> {
        same_origin(headers)?;
        let viewer = self.current(jar).ok_or(Denied::LogIn)?;
        if !same_secret(&viewer.csrf, csrf) {
            return Err(Denied::Forbidden("the form's CSRF token is not this session's: reload the page and retry"));
        }
        Ok(viewer)
    }

    /// Logs in with the one-time code of `astra-mcp ui`'s URL; `None` when it is wrong or used.
    pub fn log_in_with_code(&self, code: &str, jar: CookieJar) -> Option<CookieJar> {
        let mut slot = self.one_time_code.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.as_deref().is_some_and(|expected| same_secret(expected, code)) {
            return None;
        }
        *slot = None;
        drop(slot);
        Some(self.start(self.default.clone(), jar).1)
    }

    /// Logs in with a bearer token of the listener; `None` when it is not one.
    pub fn log_in_with_token(
        &self,
        token: &str,
        headers: &HeaderMap,
        jar: CookieJar,
    ) -> Result<Option<CookieJar>, Denied> {
        same_origin(headers)?;
        let Some(scope) = self.tokens.as_ref().and_then(|lookup| lookup(token.trim())) else { return Ok(None) };
        Ok(Some(self.start(scope, jar).1))
    }

    /// Ends the session of `jar` (after the same checks as any mutation).
    ///
    /// # Errors
    /// As [`Access::mutation`].
    pub fn log_out(&self, jar: CookieJar, headers: &HeaderMap, csrf: &str) -> Result<CookieJar, Denied> {
        self.mutation(&jar, headers, csrf)?;
        if let Some(id) = jar.get(COOKIE).map(|c| c.value().to_string()) {
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        }
        Ok(jar.remove(Cookie::build(COOKIE).path("/").build()))
    }
}

/// `Ok` when the request has no `Origin` or its `Origin` is the page's own (`http://` + `Host`).
fn same_origin(headers: &HeaderMap) -> Result<(), Denied> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin = origin.to_str().unwrap_or("").trim_end_matches('/').to_ascii_lowercase();
    let own = [format!("http://{}", host.to_ascii_lowercase()), format!("https://{}", host.to_ascii_lowercase())];
    if own.contains(&origin) {
        Ok(())
    } else {
        Err(Denied::Forbidden("a change to memory must come from this page's own origin"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(actor: &str) -> Scope {
        Scope { actor_id: actor.into(), project: "p".into() }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_one_time_code_logs_in_once() {
        let access = Access::new(scope("me"), false, Some("c0de".into()), None);
        assert!(matches!(access.viewer(CookieJar::new()), Err(Denied::LogIn)));
        assert!(access.log_in_with_code("wrong", CookieJar::new()).is_none());
        let jar = access.log_in_with_code("c0de", CookieJar::new()).expect("the code logs in");
        let (viewer, _) = access.viewer(jar).expect("the cookie is a session");
        assert_eq!(viewer.scope.actor_id, "me");
        assert!(access.log_in_with_code("c0de", CookieJar::new()).is_none(), "a used code is void");
    }

    #[test]
    fn mutations_need_the_csrf_token_and_the_own_origin() {
        let access = Access::new(scope("me"), true, None, None);
        let (viewer, jar) = access.viewer(CookieJar::new()).unwrap();
        let own = headers(&[("host", "127.0.0.1:7"), ("origin", "http://127.0.0.1:7")]);
        assert!(access.mutation(&jar, &own, &viewer.csrf).is_ok());
        assert!(matches!(access.mutation(&jar, &own, "forged"), Err(Denied::Forbidden(_))));
        let other = headers(&[("host", "127.0.0.1:7"), ("origin", "http://127.0.0.1:8")]);
        assert!(matches!(access.mutation(&jar, &other, &viewer.csrf), Err(Denied::Forbidden(_))));
        assert!(matches!(access.mutation(&CookieJar::new(), &own, &viewer.csrf), Err(Denied::LogIn)));
    }

    #[test]
    fn a_token_logs_in_as_its_actor() {
        let lookup: Box<TokenLookup> = Box::new(|t| (t == "tok-b").then(|| scope("bob")));
        let access = Access::new(scope("me"), false, None, Some(lookup));
        let h = headers(&[("host", "localhost:1")]);
        assert!(access.log_in_with_token("nope", &h, CookieJar::new()).unwrap().is_none());
        let jar = access.log_in_with_token(" tok-b ", &h, CookieJar::new()).unwrap().expect("a token logs in");
        assert_eq!(access.viewer(jar).unwrap().0.scope.actor_id, "bob");
    }
}
