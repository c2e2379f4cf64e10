//! A process's log as a kubelet would keep it, for `kubectl logs`: kwok's kubelet API reads the
//! file a `Logs` object names and parses it as the CRI log format, one line per line of output,
//! `<RFC 3339 time> <stream> F <text>` (the first line decides the parser, so every line must be
//! in it). The process itself writes its plain log (`real_node::PodLog`, which the harness and
//! the tests read); a follower copies each complete line of it into the CRI file as it appears,
//! stamped with the time it was seen (at most [`POLL`] late), so `--since-time` selects by it.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

/// How often the follower looks for new output.
pub const POLL: Duration = Duration::from_millis(250);

/// `text`'s complete lines (up to its last newline) in the CRI format, each stamped `at`, and
/// how many bytes of `text` they took: the rest is a line still being written.
pub fn cri_lines(text: &[u8], at: &str) -> (String, usize) {
    let Some(end) = text.iter().rposition(|b| *b == b'\n').map(|i| i + 1) else {
        return (String::new(), 0);
    };
    let mut out = String::new();
    for line in String::from_utf8_lossy(&text[..end]).lines() {
        // The plain log mixes stdout and stderr in one file: all of it is reported as stdout.
        out.push_str(at);
        out.push_str(" stdout F ");
        out.push_str(line);
        out.push('\n');
    }
    (out, end)
}

/// Copy what is appended to `plain` from `offset` on into `cri`, until `stop` is dropped or
/// sent to; then copy what is left (a last line without its newline included) and end.
pub fn follow(plain: PathBuf, offset: u64, cri: PathBuf, mut stop: watch::Receiver<()>) {
    tokio::spawn(async move {
        let mut at = offset;
        loop {
            let last = tokio::select! {
                _ = tokio::time::sleep(POLL) => false,
                _ = stop.changed() => true,
            };
            match copy_new(&plain, at, &cri, last) {
                Ok(n) => at += n,
                Err(e) => tracing::debug!(log = %plain.display(), "CRI copy: {e}"),
            }
            if last {
                return;
            }
        }
    });
}

/// One round: the complete lines of `plain` after `from` appended to `cri` (with `last`, a
/// trailing partial line too); the bytes of `plain` consumed.
fn copy_new(plain: &Path, from: u64, cri: &Path, last: bool) -> std::io::Result<u64> {
    let mut f = std::fs::File::open(plain)?;
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let in_file = buf.len();
    if last && !buf.is_empty() && !buf.ends_with(b"\n") {
        buf.push(b'\n');
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let (text, used) = cri_lines(&buf, &now);
    if used > 0 {
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cri)?;
        out.write_all(text.as_bytes())?;
    }
    // The newline added to a last partial line is not in the file.
    Ok(used.min(in_file) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_lines_are_stamped_and_a_partial_one_waits() {
        let (text, used) = cri_lines(b"one\ntwo\nthr", "2026-11-28T14:00:00.5Z");
        assert_eq!(
            text,
            "2026-11-28T14:00:00.5Z stdout F one\n2026-11-28T14:00:00.5Z stdout F two\n"
        );
        assert_eq!(used, 8);
        assert_eq!(cri_lines(b"no newline yet", "t"), (String::new(), 0));
        // An empty line stays a line; bytes that are not UTF-8 do not stop the copy.
        let (text, used) = cri_lines(b"\n\xff\n", "t");
        assert_eq!(text, "t stdout F \nt stdout F \u{fffd}\n");
        assert_eq!(used, 3);
    }

    #[tokio::test]
    async fn the_follower_copies_what_is_appended_and_the_rest_when_stopped() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-cri-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, cri) = (dir.join("p.log"), dir.join("p.cri"));
        std::fs::write(&plain, "header\n").unwrap();
        let (tx, rx) = watch::channel(());
        follow(plain.clone(), 7, cri.clone(), rx);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&plain)
            .unwrap();
        f.write_all(b"first\nsec").unwrap();
        tokio::time::sleep(POLL * 3).await;
        let seen = std::fs::read_to_string(&cri).unwrap();
        assert!(seen.ends_with(" stdout F first\n"), "{seen:?}");
        assert_eq!(seen.lines().count(), 1, "{seen:?}");
        f.write_all(b"ond").unwrap();
        drop(tx);
        tokio::time::sleep(POLL * 2).await;
        let seen = std::fs::read_to_string(&cri).unwrap();
        let texts: Vec<&str> = seen
            .lines()
            .map(|l| l.split_once(" stdout F ").unwrap().1)
            .collect();
        assert_eq!(texts, ["first", "second"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
