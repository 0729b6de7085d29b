//! Where a request goes, worked out once per URL and kept.
//!
//! Before a step's request can be sent, its URL is parsed (the WHATWG rules of the
//! `url` crate: about 5,900 instructions for `http://127.0.0.1:PORT/ok`, most of
//! them in the host's checks), parsed again as the `Uri` hyper sends to, and the
//! breaker's key and the URL as messages show it are written from it. Together
//! that was about a sixth of the instructions an exchange through the runner took
//! (BENCHMARKS.md, "The runner's own work on an exchange"). A workflow's steps call
//! the same few URLs again and again, so the client keeps what it worked out for
//! each ([`Targets`]): a URL seen before costs a lookup.
//!
//! What is kept is bounded: at most [`TARGETS_KEPT`] URLs, none longer than
//! [`URL_KEPT_BYTES`] (a URL carrying data in its query is seldom asked for twice);
//! when the set is full it is emptied and fills again with the URLs in use. A URL
//! that does not parse is not kept: it fails its step each time, with its reason.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use hyper::Uri;
use hyper::header::HeaderValue;
use reqwest::Url;

use crate::runners::StepFailure;

/// How many URLs the client keeps worked out.
pub(super) const TARGETS_KEPT: usize = 1024;
/// The longest URL kept.
pub(super) const URL_KEPT_BYTES: usize = 2048;

/// A step's URL, checked and worked out.
#[derive(Debug)]
pub(crate) struct Target {
    /// The URL without its credentials.
    pub(super) url: Url,
    /// The same, as hyper sends to it.
    pub(super) uri: Uri,
    /// The `Authorization: Basic` header the URL's credentials stand for
    /// (`https://user:pass@host/`), if it has any.
    pub(super) credentials: Option<HeaderValue>,
    /// `http:host:port`: the key of the host's circuit breaker.
    pub(super) breaker_key: String,
    /// The URL as messages show it: no credentials, no query, no fragment.
    pub(super) shown: String,
}

impl Target {
    /// Check `raw` (an http or https URL with a host) and work it out.
    pub(super) fn parse(raw: &str) -> Result<Self, StepFailure> {
        let mut url = Url::parse(raw)
            .map_err(|e| StepFailure::validation(format!("`url` is not a valid URL: {e}")))?;
        match url.scheme() {
            "http" | "https" => {}
            other => {
                return Err(StepFailure::validation(format!(
                    "`url` has scheme `{other}`: only http and https are allowed"
                )));
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(StepFailure::validation("`url` has no host"));
        }
        let credentials = take_credentials(&mut url);
        let uri = uri_of(&url)?;
        Ok(Self {
            breaker_key: breaker_key(&url),
            shown: redacted(&url),
            credentials,
            uri,
            url,
        })
    }
}

/// The targets of the URLs steps have asked for (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct Targets {
    kept: Mutex<HashMap<String, Arc<Target>>>,
}

impl Targets {
    /// The target of `raw`: the one kept, or worked out now (and kept).
    pub(super) fn get(&self, raw: &str) -> Result<Arc<Target>, StepFailure> {
        if let Some(target) = self.lock().get(raw) {
            return Ok(target.clone());
        }
        let target = Arc::new(Target::parse(raw)?);
        if raw.len() <= URL_KEPT_BYTES {
            let mut kept = self.lock();
            if kept.len() >= TARGETS_KEPT {
                kept.clear();
            }
            kept.insert(raw.to_string(), target.clone());
        }
        Ok(target)
    }

    /// How many are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Target>>> {
        // Each entry is inserted whole: a panic elsewhere cannot leave one half-made.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `http:host:port`.
pub(super) fn breaker_key(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(port) => format!("http:{host}:{port}"),
        None => format!("http:{host}"),
    }
}

/// The URL as messages show it: no credentials, no query, no fragment.
pub(super) fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.into()
}

/// Credentials in the URL (`https://user:pass@host/`) taken out of it, as the
/// `Authorization: Basic` header they stand for (a header the step sets wins).
fn take_credentials(url: &mut Url) -> Option<HeaderValue> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8_lossy()
            .into_owned()
    };
    let pair = format!(
        "{}:{}",
        decode(url.username()),
        url.password().map(decode).unwrap_or_default()
    );
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `url` as the `Uri` hyper sends to.
pub(super) fn uri_of(url: &Url) -> Result<Uri, StepFailure> {
    url.as_str()
        .parse()
        .map_err(|e| StepFailure::validation(format!("`url` cannot be requested: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::ErrorClass;

    #[test]
    fn bad_urls_are_validation_failures() {
        for bad in [
            "not a url",
            "ftp://example.com/file",
            "file:///etc/passwd",
            "http://",
        ] {
            let err = Target::parse(bad).unwrap_err();
            assert_eq!(err.class, ErrorClass::Validation, "{bad}");
        }
    }

    #[test]
    fn a_target_keeps_credentials_apart_and_shows_no_query() {
        let t = Target::parse("https://us%20er:p%40ss@API.example.com/v1/x?token=abc#f")
            .expect("a target");
        assert_eq!(t.url.as_str(), "https://api.example.com/v1/x?token=abc#f");
        assert_eq!(t.uri.to_string(), "https://api.example.com/v1/x?token=abc");
        assert_eq!(t.breaker_key, "http:api.example.com:443");
        assert_eq!(t.shown, "https://api.example.com/v1/x");
        let basic = t.credentials.expect("credentials");
        // base64("us er:p@ss")
        assert_eq!(basic.to_str().expect("ascii"), "Basic dXMgZXI6cEBzcw==");
        assert!(basic.is_sensitive());
        let t = Target::parse("http://127.0.0.1:8080/").expect("a target");
        assert_eq!(t.breaker_key, "http:127.0.0.1:8080");
        assert!(t.credentials.is_none());
    }

    #[test]
    fn targets_are_kept_up_to_a_bound() {
        let targets = Targets::default();
        let a = targets.get("http://a.example/").expect("a");
        let again = targets.get("http://a.example/").expect("a again");
        assert!(
            Arc::ptr_eq(&a, &again),
            "the second ask gets the kept target"
        );
        // Not kept: a URL that fails, a URL longer than the bound.
        assert!(targets.get("ftp://a.example/").is_err());
        let long = format!("http://a.example/?q={}", "x".repeat(URL_KEPT_BYTES));
        targets.get(&long).expect("a long URL works");
        assert_eq!(targets.len(), 1);
        // Full: emptied, then filled again with the URLs in use.
        for i in 1..TARGETS_KEPT {
            targets.get(&format!("http://a.example/{i}")).expect("kept");
        }
        assert_eq!(targets.len(), TARGETS_KEPT);
        let b = targets.get("http://b.example/").expect("b");
        assert_eq!(targets.len(), 1);
        assert!(Arc::ptr_eq(
            &b,
            &targets.get("http://b.example/").expect("b")
        ));
    }
}
