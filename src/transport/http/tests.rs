//! Unit tests of the HTTP transport.

use super::*;

fn guard(tokens: Vec<TokenIdentity>, origins: &[&str]) -> Guard {
    let options = HttpOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        tokens,
        allowed_hosts: vec!["memory.internal:8080".into()],
        allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
        grace: Duration::from_secs(1),
        limits: HttpLimits::default(),
        mcp: true,
        login_code: None,
    };
    Guard::new(&options, "127.0.0.1:4000".parse().unwrap(), Scope { actor_id: "local".into(), project: "p".into() })
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn foreign_hosts_and_origins_are_refused() {
    let g = guard(vec![], &["https://app.example.com", "http://tools.example.com:*"]);
    let ok = |pairs: &[(&'static str, &str)]| {
        let mut request = Request::new(axum::body::Body::empty());
        *request.headers_mut() = headers(pairs);
        g.check_host_and_origin(&request).is_ok()
    };
    // HTTP/2 names the host in `:authority`, the request's URI, and sends no Host header
    let h2 = |uri: &str| g.check_host_and_origin(&Request::post(uri).body(axum::body::Body::empty()).unwrap());
    assert!(h2("http://127.0.0.1:4000/mcp").is_ok());
    assert!(h2("http://evil.example/mcp").unwrap_err().contains("Host `evil.example` is not allowed"));
    // a Host header and an authority that disagree, or two Host headers, are refused in either order
    let request = |uri: &str, hosts: &[&str]| {
        let mut request = Request::post(uri).body(axum::body::Body::empty()).unwrap();
        for host in hosts {
            request.headers_mut().append(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        g.check_host_and_origin(&request)
    };
    assert!(request("http://127.0.0.1:4000/mcp", &["127.0.0.1:4000"]).is_ok());
    for (uri, hosts) in [
        ("http://evil.example/mcp", &["127.0.0.1:4000"][..]),
        ("http://127.0.0.1:4000/mcp", &["evil.example"]),
        ("/mcp", &["127.0.0.1:4000", "evil.example"]),
        ("/mcp", &["evil.example", "127.0.0.1:4000"]),
    ] {
        let refused = request(uri, hosts).unwrap_err();
        assert!(refused.contains("two hosts") || refused.contains("more than one Host"), "{uri} {hosts:?}: {refused}");
    }
    assert!(ok(&[("host", "127.0.0.1:4000")]));
    assert!(ok(&[("host", "localhost:4000"), ("origin", "http://localhost:5173")]));
    assert!(ok(&[("host", "[::1]:4000"), ("origin", "http://[::1]:4000")]));
    assert!(ok(&[("host", "memory.internal:8080")]));
    assert!(!ok(&[("host", "memory.internal:9999")]), "allowed_hosts with a port pins the port");
    assert!(!ok(&[("host", "evil.example:4000")]), "DNS rebinding: a foreign Host");
    assert!(!ok(&[]), "no Host");
    assert!(!ok(&[("host", "127.0.0.1:4000"), ("origin", "http://evil.example")]));
    assert!(!ok(&[("host", "127.0.0.1:4000"), ("origin", "null")]));
    assert!(!ok(&[("host", "127.0.0.1:4000"), ("origin", "http://localhost.evil.example")]));
    assert!(ok(&[("host", "127.0.0.1:4000"), ("origin", "https://app.example.com")]));
    assert!(!ok(&[("host", "127.0.0.1:4000"), ("origin", "http://app.example.com")]), "scheme matters");
    assert!(ok(&[("host", "127.0.0.1:4000"), ("origin", "http://tools.example.com:3000")]));
}

#[test]
fn tokens_map_to_their_actor_and_anything_else_is_refused() {
    let alice = Scope { actor_id: "alice".into(), project: "web".into() };
    let g = guard(vec![TokenIdentity::new("alice-token-0123456789", alice.clone())], &[]);
    let auth = |value: Option<&str>| {
        let mut h = HeaderMap::new();
        if let Some(v) = value {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        g.authenticate(&h)
    };
    assert_eq!(auth(Some("Bearer alice-token-0123456789")), Ok(alice));
    assert!(auth(Some("Bearer alice-token-012345678")).is_err());
    assert!(auth(Some("Basic YWxpY2U6eA==")).is_err());
    assert!(auth(None).is_err());
    let open = guard(vec![], &[]);
    assert_eq!(open.authenticate(&HeaderMap::new()).unwrap().actor_id, "local", "no tokens: the server's actor");
}

#[test]
fn authorities_split_into_name_and_port() {
    assert_eq!(split_authority("localhost:80"), ("localhost", Some("80")));
    assert_eq!(split_authority("[::1]:8080"), ("::1", Some("8080")));
    assert_eq!(split_authority("[::1]"), ("::1", None));
    assert_eq!(split_authority("example.com"), ("example.com", None));
}
