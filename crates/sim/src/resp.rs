//! The Redis protocol (RESP2 and RESP3), pure: incremental parsing of client commands and of
//! replies from a byte buffer, and encoding of both.
//!
//! Commands come as a multibulk (`*<n>\r\n` then `n` times `$<len>\r\n<bytes>\r\n`) or as an
//! inline line (words separated by spaces or tabs, ended by `\n` or `\r\n`; no quoting). The
//! parsers never panic: every input is either a complete value, "need more bytes", or a
//! protocol error, and the limits below bound what a peer can make them buffer.

use std::fmt;

/// Most arguments one command may have.
pub const MAX_ARGS: usize = 1024;
/// Largest bulk string a command may carry.
pub const MAX_BULK_BYTES: usize = 1 << 20;
/// Most bytes buffered for one incomplete command or reply.
pub const MAX_BUFFERED_BYTES: usize = 4 << 20;
/// Longest inline command line.
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Longest `*<n>` or `$<len>` header line (an `i64` has at most 20 characters).
const MAX_HEADER_BYTES: usize = 32;
/// Deepest nesting of aggregate replies.
const MAX_REPLY_DEPTH: usize = 32;

/// A protocol violation; the text is what Redis answers after `-ERR `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn protocol_error<T>(what: &str) -> Parsed<T> {
    Parsed::Error(ProtocolError(what.to_string()))
}

/// The outcome of parsing the front of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    /// The buffer holds the beginning of a value: read more and parse again.
    NeedMore,
    /// A value, taken from the first `consumed` bytes (always at least one).
    Complete { value: T, consumed: usize },
    /// The bytes cannot be a value: answer the error and close the connection.
    Error(ProtocolError),
}

/// A command's arguments, its name first. Empty for a blank line or `*0`, which Redis ignores.
pub type Command = Vec<Vec<u8>>;

/// Parse the command at the front of `buf`.
pub fn parse_command(buf: &[u8]) -> Parsed<Command> {
    let parsed = match buf.first() {
        None => Parsed::NeedMore,
        Some(b'*') => parse_multibulk(buf),
        Some(_) => parse_inline(buf),
    };
    match parsed {
        Parsed::NeedMore if buf.len() > MAX_BUFFERED_BYTES => protocol_error("too big request"),
        other => other,
    }
}

/// Where the line starting at `start` ends: `Ok(Some((end, next)))` with `buf[start..end]` the
/// line and `next` the index after its `\r\n`; `Ok(None)` if the line may still be completed;
/// `Err(())` if it is longer than `max` bytes.
fn crlf_line(buf: &[u8], start: usize, max: usize) -> Result<Option<(usize, usize)>, ()> {
    let rest = buf.get(start..).unwrap_or_default();
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(len) if len <= max => Ok(Some((start + len, start + len + 2))),
        Some(_) => Err(()),
        None if rest.len() > max + 1 => Err(()),
        None => Ok(None),
    }
}

/// A decimal `i64` with an optional minus sign, nothing else.
fn parse_int(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    // Accumulated as a negative number so that i64::MIN parses.
    if negative { Some(n) } else { n.checked_neg() }
}

/// Parse a `<prefix><int>\r\n` header at `start`: the number and the index after it.
fn header(buf: &[u8], start: usize) -> Result<Option<(i64, usize)>, &'static str> {
    match crlf_line(buf, start, MAX_HEADER_BYTES) {
        Err(()) => Err("too big count string"),
        Ok(None) => Ok(None),
        Ok(Some((end, next))) => match parse_int(buf.get(start + 1..end).unwrap_or_default()) {
            Some(n) => Ok(Some((n, next))),
            None => Err("invalid length"),
        },
    }
}

fn parse_multibulk(buf: &[u8]) -> Parsed<Command> {
    let (count, mut pos) = match header(buf, 0) {
        Ok(Some(h)) => h,
        Ok(None) => return Parsed::NeedMore,
        Err(_) => return protocol_error("invalid multibulk length"),
    };
    if count > MAX_ARGS as i64 {
        return protocol_error("invalid multibulk length");
    }
    // First find every argument, so an incomplete command copies nothing.
    let mut ranges = Vec::new();
    for _ in 0..count.max(0) {
        match buf.get(pos) {
            None => return Parsed::NeedMore,
            Some(b'$') => {}
            Some(other) => {
                return protocol_error(&format!("expected '$', got '{}'", printable(*other)));
            }
        }
        let (len, start) = match header(buf, pos) {
            Ok(Some(h)) => h,
            Ok(None) => return Parsed::NeedMore,
            Err(_) => return protocol_error("invalid bulk length"),
        };
        let Some(len) = usize::try_from(len).ok().filter(|l| *l <= MAX_BULK_BYTES) else {
            return protocol_error("invalid bulk length");
        };
        let end = start + len;
        match buf.get(end..end + 2) {
            None => return Parsed::NeedMore,
            Some(b"\r\n") => {}
            Some(_) => return protocol_error("bulk string not followed by CRLF"),
        }
        ranges.push(start..end);
        pos = end + 2;
    }
    let value = ranges.into_iter().map(|r| buf[r].to_vec()).collect();
    Parsed::Complete {
        value,
        consumed: pos,
    }
}

fn printable(b: u8) -> char {
    if b.is_ascii_graphic() || b == b' ' {
        char::from(b)
    } else {
        '?'
    }
}

fn parse_inline(buf: &[u8]) -> Parsed<Command> {
    let Some(newline) = buf
        .iter()
        .take(MAX_INLINE_BYTES + 1)
        .position(|b| *b == b'\n')
    else {
        return if buf.len() > MAX_INLINE_BYTES {
            protocol_error("too big inline request")
        } else {
            Parsed::NeedMore
        };
    };
    let line = buf[..newline]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..newline]);
    let value: Command = line
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if value.len() > MAX_ARGS {
        return protocol_error("too many arguments in inline request");
    }
    Parsed::Complete {
        value,
        consumed: newline + 1,
    }
}

/// Encode a command as a client sends it: a multibulk of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        put_bulk(&mut out, a.as_ref());
    }
    out
}

fn put_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// The protocol version a connection speaks (`HELLO 3` switches to RESP3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

/// A reply. RESP2 has no null or map type: it encodes `Null` as the null bulk string and a
/// `Map` as a flat array of keys and values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A simple string; CR and LF in it are sent as spaces.
    Simple(String),
    /// An error, its code first (`ERR ...`); CR and LF in it are sent as spaces.
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    /// Append the reply's encoding in `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => put_line(out, b'+', s),
            Reply::Error(s) => put_line(out, b'-', s),
            Reply::Integer(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Reply::Bulk(b) => put_bulk(out, b),
            Reply::Null => match proto {
                Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                let header = match proto {
                    Protocol::Resp2 => format!("*{}\r\n", pairs.len() * 2),
                    Protocol::Resp3 => format!("%{}\r\n", pairs.len()),
                };
                out.extend_from_slice(header.as_bytes());
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
        }
    }

    pub fn to_bytes(&self, proto: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(proto, &mut out);
        out
    }
}

/// A one-line reply: CR and LF would end it early and let the rest pass for another reply.
fn put_line(out: &mut Vec<u8>, prefix: u8, text: &str) {
    out.push(prefix);
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// Parse the reply at the front of `buf` (RESP2 or RESP3: `+ - : $ * _ %`; the null bulk
/// string and the null array both give `Null`). For clients and tests.
pub fn parse_reply(buf: &[u8]) -> Parsed<Reply> {
    match reply_at(buf, 0, 0) {
        Ok(Some((value, consumed))) => Parsed::Complete { value, consumed },
        Ok(None) if buf.len() > MAX_BUFFERED_BYTES => protocol_error("too big reply"),
        Ok(None) => Parsed::NeedMore,
        Err(e) => Parsed::Error(e),
    }
}

type ReplyStep = Result<Option<(Reply, usize)>, ProtocolError>;

fn reply_at(buf: &[u8], start: usize, depth: usize) -> ReplyStep {
    let bad = |what: &str| Err(ProtocolError(what.to_string()));
    if depth > MAX_REPLY_DEPTH {
        return bad("replies nested too deep");
    }
    let Some(kind) = buf.get(start) else {
        return Ok(None);
    };
    let line_end = crlf_line(buf, start, MAX_BUFFERED_BYTES)
        .map_err(|()| ProtocolError("too long line".into()))?;
    let Some((end, next)) = line_end else {
        return Ok(None);
    };
    // Empty when the line is just the type byte (or the type byte is the CR of the CRLF).
    let line = buf.get(start + 1..end).unwrap_or_default();
    let text = || String::from_utf8_lossy(line).into_owned();
    let number = || parse_int(line).ok_or(ProtocolError("invalid length".into()));
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), next))),
        b'-' => Ok(Some((Reply::Error(text()), next))),
        b':' => Ok(Some((Reply::Integer(number()?), next))),
        b'_' if line.is_empty() => Ok(Some((Reply::Null, next))),
        b'$' => {
            let len = number()?;
            if len == -1 {
                return Ok(Some((Reply::Null, next)));
            }
            let Some(len) = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_BUFFERED_BYTES)
            else {
                return bad("invalid bulk length");
            };
            match buf.get(next + len..next + len + 2) {
                None => Ok(None),
                Some(b"\r\n") => Ok(Some((
                    Reply::Bulk(buf[next..next + len].to_vec()),
                    next + len + 2,
                ))),
                Some(_) => bad("bulk string not followed by CRLF"),
            }
        }
        b'*' | b'%' => {
            let count = number()?;
            if count == -1 && *kind == b'*' {
                return Ok(Some((Reply::Null, next)));
            }
            let Some(count) = usize::try_from(count)
                .ok()
                .filter(|c| *c <= MAX_BUFFERED_BYTES)
            else {
                return bad("invalid aggregate length");
            };
            let items = if *kind == b'%' { count * 2 } else { count };
            let mut values = Vec::new();
            let mut pos = next;
            for _ in 0..items {
                let Some((value, after)) = reply_at(buf, pos, depth + 1)? else {
                    return Ok(None);
                };
                values.push(value);
                pos = after;
            }
            let reply = if *kind == b'%' {
                let mut pairs = Vec::with_capacity(count);
                let mut it = values.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            } else {
                Reply::Array(values)
            };
            Ok(Some((reply, pos)))
        }
        other => bad(&format!("unexpected reply type '{}'", printable(*other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn complete(args: &[&[u8]], consumed: usize) -> Parsed<Command> {
        Parsed::Complete {
            value: args.iter().map(|a| a.to_vec()).collect(),
            consumed,
        }
    }

    fn is_error<T>(p: &Parsed<T>) -> bool {
        matches!(p, Parsed::Error(_))
    }

    #[test]
    fn parses_multibulk_commands_incrementally() {
        let wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
        let first = 31;
        for cut in 0..first {
            assert_eq!(
                parse_command(&wire[..cut]),
                Parsed::NeedMore,
                "cut at {cut}"
            );
        }
        assert_eq!(
            parse_command(wire),
            complete(&[b"SET", b"k", b"hello"], first)
        );
        assert_eq!(parse_command(&wire[first..]), complete(&[b"PING"], 14));
        assert_eq!(parse_command(b"*0\r\n"), complete(&[], 4));
        assert_eq!(parse_command(b"*1\r\n$0\r\n\r\n"), complete(&[b""], 10));
    }

    #[test]
    fn parses_inline_commands() {
        assert_eq!(parse_command(b"PING\r\n"), complete(&[b"PING"], 6));
        assert_eq!(
            parse_command(b"set  k\tv\nGET"),
            complete(&[b"set", b"k", b"v"], 9)
        );
        assert_eq!(parse_command(b"GET k"), Parsed::NeedMore);
        assert_eq!(parse_command(b"\r\n"), complete(&[], 2));
    }

    #[test]
    fn rejects_malformed_and_oversized_commands() {
        for bad in [
            &b"*x\r\n"[..],
            b"*-\r\n",
            b"*1025\r\n",
            b"*99999999999999999999999\r\n",
            b"*1\r\n:3\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$1048577\r\n",
            b"*1\r\n$3\r\nGETxx",
            b"*1\r\n$abc\r\n",
            b"*123456789012345678901234567890123",
        ] {
            assert!(
                is_error(&parse_command(bad)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long_inline = vec![b'a'; MAX_INLINE_BYTES + 1];
        assert!(is_error(&parse_command(&long_inline)));
        // A bulk of the largest allowed size, arriving slowly, is not an error yet...
        let mut big = format!("*2\r\n${MAX_BULK_BYTES}\r\n").into_bytes();
        big.resize(big.len() + MAX_BULK_BYTES, b'x');
        assert_eq!(parse_command(&big), Parsed::NeedMore);
        // ...but a request that would need more than the buffer limit is.
        let mut huge = b"*5\r\n".to_vec();
        for _ in 0..5 {
            huge.extend_from_slice(format!("${MAX_BULK_BYTES}\r\n").as_bytes());
            huge.resize(huge.len() + MAX_BULK_BYTES, b'x');
            huge.extend_from_slice(b"\r\n");
        }
        assert!(is_error(&parse_command(&huge[..MAX_BUFFERED_BYTES + 10])));
    }

    #[test]
    fn encodes_replies_in_both_protocols() {
        let map = Reply::Map(vec![(Reply::bulk("proto"), Reply::Integer(3))]);
        assert_eq!(
            map.to_bytes(Protocol::Resp3),
            b"%1\r\n$5\r\nproto\r\n:3\r\n"
        );
        assert_eq!(
            map.to_bytes(Protocol::Resp2),
            b"*2\r\n$5\r\nproto\r\n:3\r\n"
        );
        assert_eq!(Reply::Null.to_bytes(Protocol::Resp2), b"$-1\r\n");
        assert_eq!(Reply::Null.to_bytes(Protocol::Resp3), b"_\r\n");
        assert_eq!(Reply::ok().to_bytes(Protocol::Resp2), b"+OK\r\n");
        assert_eq!(
            Reply::err("ERR a\r\nb").to_bytes(Protocol::Resp2),
            b"-ERR a  b\r\n",
            "no reply injection through an error text"
        );
        assert_eq!(Reply::Integer(-7).to_bytes(Protocol::Resp3), b":-7\r\n");
        assert_eq!(
            Reply::Array(vec![Reply::bulk(""), Reply::Null]).to_bytes(Protocol::Resp2),
            b"*2\r\n$0\r\n\r\n$-1\r\n"
        );
    }

    #[test]
    fn parses_replies_of_both_protocols() {
        let p = |b: &[u8]| match parse_reply(b) {
            Parsed::Complete { value, consumed } if consumed == b.len() => Some(value),
            _ => None,
        };
        assert_eq!(p(b"$-1\r\n"), Some(Reply::Null));
        assert_eq!(p(b"*-1\r\n"), Some(Reply::Null));
        assert_eq!(p(b"_\r\n"), Some(Reply::Null));
        assert_eq!(p(b"-NOAUTH x\r\n"), Some(Reply::err("NOAUTH x")));
        assert_eq!(parse_reply(b"*2\r\n:1\r\n"), Parsed::NeedMore);
        assert!(is_error(&parse_reply(b"!3\r\nerr\r\n")));
        let deep = "*1\r\n".repeat(MAX_REPLY_DEPTH + 2);
        assert!(
            is_error(&parse_reply(deep.as_bytes())),
            "deep nesting is refused, not a stack overflow"
        );
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let text = "[ -~]{0,12}";
        let leaf = prop_oneof![
            text.prop_map(Reply::Simple),
            text.prop_map(Reply::Error),
            any::<i64>().prop_map(Reply::Integer),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Reply::Bulk),
            Just(Reply::Null),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Reply::Array),
                proptest::collection::vec((inner.clone(), inner), 0..3).prop_map(Reply::Map),
            ]
        })
    }

    fn args() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8)
    }

    /// Bytes that look like RESP often enough to reach the deep branches.
    fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop_oneof![
            Just(b"*".to_vec()),
            Just(b"$".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"-".to_vec()),
            Just(b"%".to_vec()),
            Just(b"_".to_vec()),
            Just(b" ".to_vec()),
            Just(b"\n".to_vec()),
            (0u32..40).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(token, 0..24).prop_map(|t| t.concat())
    }

    /// A valid command with one byte changed, inserted or removed, or cut short.
    fn mutated_command() -> impl Strategy<Value = Vec<u8>> {
        (args(), any::<prop::sample::Index>(), any::<u8>(), 0..4u8).prop_map(
            |(args, at, byte, how)| {
                let mut wire = encode_command(&args);
                let i = at.index(wire.len());
                match how {
                    0 => wire[i] = byte,
                    1 => wire.insert(i, byte),
                    2 => {
                        wire.remove(i);
                    }
                    _ => wire.truncate(i),
                }
                wire
            },
        )
    }

    fn check_outcome<T>(buf: &[u8], parsed: &Parsed<T>) -> Result<(), TestCaseError> {
        if let Parsed::Complete { consumed, .. } = parsed {
            prop_assert!(*consumed >= 1 && *consumed <= buf.len());
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn commands_round_trip_and_every_prefix_needs_more(args in args()) {
            let wire = encode_command(&args);
            prop_assert_eq!(
                parse_command(&wire),
                Parsed::Complete { value: args.clone(), consumed: wire.len() }
            );
            for cut in 0..wire.len() {
                prop_assert_eq!(parse_command(&wire[..cut]), Parsed::NeedMore);
            }
        }

        #[test]
        fn replies_round_trip_in_resp3(reply in reply()) {
            let wire = reply.to_bytes(Protocol::Resp3);
            let sent = parse_reply(&wire);
            // Simple strings and errors lose CR/LF on the wire; the generator has none.
            prop_assert_eq!(sent, Parsed::Complete { value: reply, consumed: wire.len() });
        }
    }

    /// Arbitrary and near-valid input never panics, a complete value always consumes part of
    /// the buffer, and the inputs reach all three outcomes.
    #[test]
    fn arbitrary_bytes_never_panic_and_reach_every_outcome() {
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        use std::cell::Cell;
        let inputs = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            resp_like_bytes(),
            mutated_command(),
        ];
        // Over a fixed seed, whose reach is asserted (the same in every run), then drawn at
        // random in addition (new inputs every run), where only the property is.
        let fixed = TestRng::from_seed(RngAlgorithm::ChaCha, &[43; 32]);
        for (mut runner, is_fixed) in [
            (
                TestRunner::new_with_rng(Config::with_cases(2000), fixed),
                true,
            ),
            (TestRunner::new(Config::with_cases(2000)), false),
        ] {
            let counts = [Cell::new(0u32), Cell::new(0u32), Cell::new(0u32)];
            runner
                .run(&inputs, |buf| {
                    let command = parse_command(&buf);
                    check_outcome(&buf, &command)?;
                    check_outcome(&buf, &parse_reply(&buf))?;
                    let kind = match command {
                        Parsed::NeedMore => 0,
                        Parsed::Complete { .. } => 1,
                        Parsed::Error(_) => 2,
                    };
                    counts[kind].set(counts[kind].get() + 1);
                    Ok(())
                })
                .unwrap();
            let [need_more, complete, error] = counts.map(|c| c.get());
            assert!(
                !is_fixed || (need_more > 0 && complete > 0 && error > 0),
                "{need_more} {complete} {error}"
            );
        }
    }
}
