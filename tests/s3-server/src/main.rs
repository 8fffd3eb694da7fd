//! An S3-compatible server over a local directory, for tests and benchmarks on loopback.
//!
//! It is [s3s-fs] (the file-system backend of the `s3s` S3 service crate) with one change that
//! object storage needs for Lance's commits: s3s-fs checks `If-None-Match` / `If-Match` before it
//! writes, not atomically with the write, so two conditional PUTs of one key that arrive together
//! could both succeed. Here every conditional write runs under one lock, so the second of two
//! `If-None-Match: *` PUTs of one key gets `412 Precondition Failed`, as on AWS S3
//! (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html>).
//!
//! Requests are signed (AWS Signature Version 4) with `--access-key` / `--secret-key`.
//!
//! `--ignore-conditional-writes` drops those headers instead, to stand for the stores that accept
//! a conditional PUT and overwrite anyway (lance-format/lance#4205): astra-mcp must refuse them. A
//! signature covers the headers it drops, so that mode takes unsigned requests only (clients set
//! `AWS_SKIP_SIGNATURE=true`).
//!
//! Prints `listening on http://ADDR` on stdout once it accepts connections.
//!
//! [s3s-fs]: https://crates.io/crates/s3s-fs

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use hyper::header::{IF_MATCH, IF_NONE_MATCH};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::Mutex;

#[derive(Debug, Parser)]
struct Opt {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Accept conditional writes and ignore their condition (a store that loses commits); unsigned
    /// requests only.
    #[arg(long, conflicts_with_all = ["access_key", "secret_key"])]
    ignore_conditional_writes: bool,
    /// Access key id of the one account.
    #[arg(long, required_unless_present = "ignore_conditional_writes")]
    access_key: Option<String>,
    /// Its secret key.
    #[arg(long, required_unless_present = "ignore_conditional_writes")]
    secret_key: Option<String>,
    /// Directory that holds the buckets: one subdirectory per bucket.
    root: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let opt = Opt::parse();
    std::fs::create_dir_all(&opt.root)?;
    let fs = s3s_fs::FileSystem::new(&opt.root).map_err(|e| format!("{}: {e:?}", opt.root.display()))?;
    let mut service = S3ServiceBuilder::new(fs);
    if let (Some(access_key), Some(secret_key)) = (opt.access_key, opt.secret_key) {
        service.set_auth(s3s::auth::SimpleAuth::from_single(access_key, secret_key));
    }
    let service = service.build();
    let conditional_writes = Arc::new(Mutex::new(()));
    let ignore = opt.ignore_conditional_writes;

    let listener = TcpListener::bind(&opt.listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let http = ConnBuilder::new(TokioExecutor::new());
    loop {
        let (socket, _) = listener.accept().await?;
        // hyper leaves Nagle's algorithm on: a response written as headers then body waited for the
        // client's delayed ACK (40 ms on Linux) before its body left. S3 and the servers built on Go's
        // net package send at once, as this now does.
        socket.set_nodelay(true)?;
        let service = service.clone();
        let lock = Arc::clone(&conditional_writes);
        let handler = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let lock = Arc::clone(&lock);
            async move {
                let mut req = req.map(s3s::Body::from);
                let conditional = req.method() != hyper::Method::GET
                    && req.method() != hyper::Method::HEAD
                    && (req.headers().contains_key(IF_NONE_MATCH) || req.headers().contains_key(IF_MATCH));
                if conditional && ignore {
                    req.headers_mut().remove(IF_NONE_MATCH);
                    req.headers_mut().remove(IF_MATCH);
                    return service.call(req).await;
                }
                let _serialised = if conditional { Some(lock.lock().await) } else { None };
                service.call(req).await
            }
        });
        let conn = http.serve_connection(TokioIo::new(socket), handler).into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
