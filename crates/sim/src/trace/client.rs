//! A minimal pipelining RESP client over TCP, with a deadline on every exchange.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::resp::{Parsed, Reply, encode_command, parse_reply};

pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RespConn {
    pub async fn connect(addr: SocketAddr, within: Duration) -> anyhow::Result<Self> {
        let stream = timeout(within, TcpStream::connect(addr))
            .await
            .with_context(|| format!("connecting to {addr}: timed out"))?
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(RespConn {
            stream,
            buf: Vec::new(),
        })
    }

    /// One command and its reply.
    pub async fn call<A: AsRef<[u8]>>(
        &mut self,
        args: &[A],
        within: Duration,
    ) -> anyhow::Result<Reply> {
        let mut replies = self.pipeline(&encode_command(args), 1, within).await?;
        replies.pop().context("no reply")
    }

    /// Send the `count` commands encoded in `requests` and read their `count` replies, writing
    /// and reading at the same time, all within `within`.
    pub async fn pipeline(
        &mut self,
        requests: &[u8],
        count: usize,
        within: Duration,
    ) -> anyhow::Result<Vec<Reply>> {
        let (mut rd, mut wr) = self.stream.split();
        let buf = &mut self.buf;
        let write = async {
            wr.write_all(requests).await?;
            wr.flush().await?;
            anyhow::Ok(())
        };
        let read = async {
            let mut replies = Vec::with_capacity(count);
            let mut pos = 0;
            let mut chunk = vec![0u8; 64 * 1024];
            while replies.len() < count {
                match parse_reply(&buf[pos..]) {
                    Parsed::Complete { value, consumed } => {
                        pos += consumed;
                        replies.push(value);
                        continue;
                    }
                    Parsed::Error(e) => bail!("bad reply: {e}"),
                    Parsed::NeedMore => {}
                }
                buf.drain(..pos);
                pos = 0;
                let n = rd.read(&mut chunk).await?;
                if n == 0 {
                    bail!(
                        "connection closed after {} of {count} replies",
                        replies.len()
                    );
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..pos);
            Ok(replies)
        };
        let (w, r) = timeout(within, async { tokio::join!(write, read) })
            .await
            .context("RESP exchange timed out")?;
        w?;
        r
    }
}
