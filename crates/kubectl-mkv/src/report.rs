//! `kubectl mkv report`: the pure half of the support bundle. What goes in, under which name,
//! and what is taken out before anything is written: the objects are stripped of what may hold
//! a secret (a plain env value under a secret-looking name, `last-applied-configuration`,
//! managedFields), and every value of every Secret the cluster uses is replaced in every file,
//! logs and member answers included. The shell (`main.rs`) reads the API and the members
//! (through the API server's port-forward) and hands the answers here.

use std::collections::BTreeMap;
use std::io::Write as _;

use serde_json::Value;

/// What replaces a secret wherever it appears.
pub const REDACTED: &str = "<redacted>";

/// Env names whose plain value is taken out of every object (a password set as a plain value,
/// a token in the operator's extraEnv).
const SECRET_WORDS: [&str; 6] = ["PASS", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "AUTH"];

/// The bundle being built: file name → content, and what could not be collected.
#[derive(Default)]
pub struct Bundle {
    files: BTreeMap<String, Vec<u8>>,
    missing: Vec<(String, String)>,
}

impl Bundle {
    /// `object` as YAML under `name`, with [`strip_object`] applied.
    pub fn add_object(&mut self, name: &str, mut object: Value) {
        strip_object(&mut object);
        let text = serde_yaml_ng::to_string(&object).unwrap_or_else(|e| format!("# {e}\n"));
        self.files.insert(name.to_string(), text.into_bytes());
    }

    /// A list of objects as one YAML list under `name`.
    pub fn add_objects(&mut self, name: &str, objects: Vec<Value>) {
        self.add_object(name, Value::Array(objects));
    }

    pub fn add_text(&mut self, name: &str, text: impl Into<Vec<u8>>) {
        self.files.insert(name.to_string(), text.into());
    }

    /// `name` could not be collected, and why (listed in the bundle's README).
    pub fn missing(&mut self, name: &str, why: impl std::fmt::Display) {
        self.missing.push((name.to_string(), format!("{why:#}")));
    }

    pub fn missing_parts(&self) -> &[(String, String)] {
        &self.missing
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// The zip: `README.txt` (what is in it, what is not, `header`), then every file, each with
    /// every value of `secrets` (and its base64 form) replaced by [`REDACTED`].
    pub fn to_zip(&self, header: &str, secrets: &[String]) -> anyhow::Result<Vec<u8>> {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        let needles = needles(secrets);
        let readme = self.readme(header);
        for (name, content) in std::iter::once(("README.txt", readme.as_bytes()))
            .chain(self.files.iter().map(|(n, c)| (n.as_str(), c.as_slice())))
        {
            zip.start_file(name, options)?;
            zip.write_all(&scrub(content, &needles))?;
        }
        zip.finish()?;
        Ok(out.into_inner())
    }

    fn readme(&self, header: &str) -> String {
        let mut text = format!("{header}\n\nFiles:\n");
        for name in self.files.keys() {
            text.push_str(&format!("  {name}\n"));
        }
        if self.missing.is_empty() {
            text.push_str("\nEverything asked for was collected.\n");
        } else {
            text.push_str("\nNot collected:\n");
            for (name, why) in &self.missing {
                text.push_str(&format!("  {name}: {why}\n"));
            }
        }
        text.push_str(&format!(
            "\nRedacted: the value of every Secret key the cluster's members and spec.auth use \
             (and its base64 form) wherever it appeared, plain env values named like a secret \
             ({}), last-applied-configuration annotations and managedFields. No Secret object \
             is included.\n",
            SECRET_WORDS.join(", ")
        ));
        text
    }
}

/// The strings to replace: each secret and its base64 form, longest first (so a secret that
/// contains another is replaced whole); empty values are skipped.
fn needles(secrets: &[String]) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = secrets
        .iter()
        .filter(|s| !s.is_empty())
        .flat_map(|s| [s.as_bytes().to_vec(), base64(s.as_bytes()).into_bytes()])
        .collect();
    all.sort_by_key(|n| std::cmp::Reverse(n.len()));
    all.dedup();
    all
}

/// `content` with every needle replaced by [`REDACTED`].
pub fn scrub(content: &[u8], needles: &[Vec<u8>]) -> Vec<u8> {
    let mut text = content.to_vec();
    for needle in needles {
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            if text[i..].starts_with(needle) {
                out.extend_from_slice(REDACTED.as_bytes());
                i += needle.len();
            } else {
                out.push(text[i]);
                i += 1;
            }
        }
        text = out;
    }
    text
}

/// Take out of an API object (or a list of them) what may hold a secret or is only noise.
pub fn strip_object(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(strip_object),
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                meta.remove("managedFields");
                if let Some(Value::Object(ann)) = meta.get_mut("annotations") {
                    ann.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
            }
            let secret_named = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(names_a_secret);
            if secret_named && map.get("value").is_some_and(Value::is_string) {
                map.insert("value".into(), Value::String(REDACTED.into()));
            }
            map.values_mut().for_each(strip_object);
        }
        _ => {}
    }
}

fn names_a_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
}

/// The Events of `events` about the object `kind`/`name`.
pub fn events_about(events: &[Value], kind: &str, name: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| {
            let about = &e["involvedObject"];
            about["kind"] == kind && about["name"] == name
        })
        .cloned()
        .collect()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A RESP command as the array of bulk strings a server reads.
pub fn resp_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One RESP reply: a simple string, a bulk string or an integer as its text; an error as `Err`.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Text(String),
    Error(String),
}

/// The first reply in `buf` and the bytes it took, or `None` while it is incomplete.
pub fn parse_reply(buf: &[u8]) -> Option<(Reply, usize)> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&buf[1..line_end]).into_owned();
    let after = line_end + 2;
    match buf.first()? {
        b'+' | b':' => Some((Reply::Text(line), after)),
        b'-' => Some((Reply::Error(line), after)),
        b'$' => {
            let len: i64 = line.parse().ok()?;
            if len < 0 {
                return Some((Reply::Text(String::new()), after));
            }
            let end = after + len as usize;
            (buf.len() >= end + 2).then(|| {
                let text = String::from_utf8_lossy(&buf[after..end]).into_owned();
                (Reply::Text(text), end + 2)
            })
        }
        other => Some((
            Reply::Error(format!("unexpected reply type {:?}", *other as char)),
            buf.len(),
        )),
    }
}

/// The first `n` replies in `buf`, once all of them are whole.
pub fn parse_replies(buf: &[u8], n: usize) -> Option<Vec<Reply>> {
    let mut replies = Vec::new();
    let mut at = 0;
    while replies.len() < n {
        let (reply, used) = parse_reply(&buf[at..])?;
        replies.push(reply);
        at += used;
    }
    Some(replies)
}

/// Whether `response` holds a whole HTTP/1.x response: its body as long as its
/// `Content-Length`, or its last chunk read. Without either the stream's end tells.
pub fn http_complete(response: &[u8]) -> bool {
    let Some(head_end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
    let body = &response[head_end + 4..];
    for line in head.lines() {
        if let Some(len) = line.strip_prefix("content-length:") {
            return len.trim().parse::<usize>().is_ok_and(|l| body.len() >= l);
        }
        if line.starts_with("transfer-encoding:") && line.contains("chunked") {
            return body.ends_with(b"0\r\n\r\n");
        }
    }
    false
}

/// The body of an HTTP/1.x response to a request sent with `Connection: close`, read whole; an
/// error names the status when it is not 200.
pub fn http_body(response: &[u8]) -> anyhow::Result<Vec<u8>> {
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no complete HTTP response ({} bytes)", response.len()))?;
    let head = String::from_utf8_lossy(&response[..head_end]);
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "answered {status:?}"
    );
    let body = &response[head_end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_vec())
    }
}

fn dechunk(mut body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow::anyhow!("a chunk size line is cut"))?;
        let size_text = String::from_utf8_lossy(&body[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)?;
        body = &body[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        anyhow::ensure!(body.len() >= size + 2, "a chunk is cut");
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// A duration as `--since` takes it: a number and a unit, s, m, h or d (`90m`, `2h`).
pub fn parse_since(text: &str) -> Result<i64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30m, 2h or 1d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    match n.checked_mul(secs) {
        Some(s) if s > 0 => Ok(s),
        _ => Err(format!(
            "{text:?} must be more than 0 and less than forever"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_secret_and_its_base64_form_is_replaced_longest_first() {
        assert_eq!(base64(b"hunter22"), "aHVudGVyMjI=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        let needles = needles(&["hunter22".into(), "hunter".into(), String::new()]);
        let text = b"pass=hunter22 b64=aHVudGVyMjI= short=hunter end";
        let out = String::from_utf8(scrub(text, &needles)).unwrap();
        assert_eq!(out, "pass=<redacted> b64=<redacted> short=<redacted> end");
    }

    #[test]
    fn objects_lose_secret_looking_env_values_and_noise_only() {
        let mut pod = json!({
            "metadata": {"name": "demo-0", "managedFields": [{"manager": "x"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{..}",
                                "marekvs.io/template-hash": "abc"}},
            "spec": {"containers": [{"name": "marekvs", "env": [
                {"name": "MAREKVS_REQUIREPASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "API_TOKEN", "value": "t0k3n"},
                {"name": "MAREKVS_REPLICAS_N", "value": "2"},
            ]}]}
        });
        strip_object(&mut pod);
        assert!(pod["metadata"].get("managedFields").is_none());
        assert_eq!(
            pod["metadata"]["annotations"],
            json!({"marekvs.io/template-hash": "abc"})
        );
        let env = &pod["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["valueFrom"]["secretKeyRef"]["name"], "s");
        assert_eq!(env[1]["value"], REDACTED);
        assert_eq!(env[2]["value"], "2");
    }

    #[test]
    fn the_zip_holds_a_readme_and_every_file_scrubbed() {
        let mut bundle = Bundle::default();
        bundle.add_object("cluster.yaml", json!({"spec": {"note": "pw is s3cret!"}}));
        bundle.add_text("members/demo-0/cluster-nodes.txt", "id s3cret! myself\n");
        bundle.missing("operator/logs", "forbidden");
        let bytes = bundle
            .to_zip("report of demo", &["s3cret!".into()])
            .unwrap();
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
        let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "README.txt",
                "cluster.yaml",
                "members/demo-0/cluster-nodes.txt"
            ]
        );
        for i in 0..zip.len() {
            let mut f = zip.by_index(i).unwrap();
            let name = f.name().unwrap().to_string();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut f, &mut text).unwrap();
            assert!(!text.contains("s3cret!"), "{name}: {text}");
            if name == "README.txt" {
                assert!(text.starts_with("report of demo"), "{text}");
                assert!(text.contains("operator/logs: forbidden"), "{text}");
            }
        }
    }

    #[test]
    fn events_are_picked_by_the_object_they_are_about() {
        let events = vec![
            json!({"reason": "A", "involvedObject": {"kind": "Pod", "name": "demo-0"}}),
            json!({"reason": "B", "involvedObject": {"kind": "PersistentVolumeClaim", "name": "demo-0"}}),
            json!({"reason": "C", "involvedObject": {"kind": "Pod", "name": "demo-01"}}),
        ];
        let picked = events_about(&events, "Pod", "demo-0");
        assert_eq!(picked.len(), 1);
        assert_eq!(picked[0]["reason"], "A");
    }

    #[test]
    fn resp_replies_are_read_whole_or_not_at_all() {
        assert_eq!(
            resp_command(&["AUTH", "pw"]),
            b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
        );
        assert_eq!(
            parse_reply(b"+OK\r\n$5\r\nab"),
            Some((Reply::Text("OK".into()), 5))
        );
        assert_eq!(parse_reply(b"$5\r\nab"), None);
        assert_eq!(
            parse_reply(b"$5\r\nab\ncd\r\n"),
            Some((Reply::Text("ab\ncd".into()), 11))
        );
        assert_eq!(
            parse_reply(b"-NOAUTH Authentication required.\r\n"),
            Some((Reply::Error("NOAUTH Authentication required.".into()), 34))
        );
        assert_eq!(parse_reply(b"+OK"), None);
        assert_eq!(parse_replies(b"+OK\r\n$2\r\nab", 2), None);
        assert_eq!(
            parse_replies(b"+OK\r\n$2\r\nab\r\n", 2),
            Some(vec![Reply::Text("OK".into()), Reply::Text("ab".into())])
        );
    }

    #[test]
    fn http_bodies_plain_and_chunked_and_a_failure_names_its_status() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(http_body(plain).unwrap(), b"hello");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
        assert_eq!(http_body(chunked).unwrap(), b"hello");
        let err = http_body(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").unwrap_err();
        assert!(err.to_string().contains("503"), "{err}");
        assert!(http_body(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(http_complete(plain));
        assert!(!http_complete(&plain[..plain.len() - 1]));
        assert!(http_complete(chunked));
        assert!(!http_complete(&chunked[..chunked.len() - 2]));
        assert!(!http_complete(b"HTTP/1.1 200 OK\r\n\r\nno length"));
    }

    #[test]
    fn since_takes_a_number_and_a_unit() {
        assert_eq!(parse_since("90m"), Ok(5400));
        assert_eq!(parse_since("2h"), Ok(7200));
        assert_eq!(parse_since("1d"), Ok(86_400));
        assert!(parse_since("10").unwrap_err().contains("unit"));
        assert!(parse_since("h").is_err());
        assert!(parse_since("0s").is_err());
    }
}
