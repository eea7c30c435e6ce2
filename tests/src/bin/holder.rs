//! A lock holder in its own process, for the scenarios that pause or shim a *client*
//! (reliability.md RL-08, RL-11). Driven line by line over stdin/stdout by the test.
//!
//! - `holder pause <store-url> <register> <fenced 0|1> <node-url>...`: locks `rl08` (ttl 1 s,
//!   auto-extended, fenced), reads the register and prints `READ <value> <fence>`; after the
//!   next stdin line (the test stops and resumes the process in between) prints
//!   `AFTER <is_valid> <is_lost>`, writes `value + 1` (through the fencing check when fenced)
//!   and prints `WROTE <written>`.
//! - `holder clock <node-url>...`: locks `rl11` (ttl 10 s) and prints `HELD`; for each stdin
//!   line prints `CHECK <deviation µs> <is_valid> <wall-clock ms>`, where the deviation is how
//!   far `remaining_validity + elapsed` moved from the remaining validity at acquisition.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test helper: a failure is the report

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlock_core::{LockOptions, Redlock};
use redlock_tests::checker::{Fenced, Register};
use tokio::io::{AsyncBufReadExt, BufReader};

/// This process's holder id at the register's fencing check (the test's own holder is 2).
const HOLDER: u64 = 1;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    match args.first().map(String::as_str) {
        Some("pause") => {
            let (store, register, fenced) = (&args[1], &args[2], args[3] == "1");
            let redlock = handle(&args[4..]).await;
            let options = LockOptions::default()
                .ttl(Duration::from_secs(1))
                .auto_extend(true)
                .fencing(true);
            let guard = redlock.lock_with("rl08", &options).await.unwrap();
            let fence = guard.fencing_token().unwrap();
            let register = Register::connect(store, register).await;
            let value = if fenced {
                register.read_fenced(fence, HOLDER).await.unwrap()
            } else {
                register.read().await
            };
            println!("READ {value} {fence}");
            let _ = lines.next_line().await;
            println!("AFTER {} {}", guard.is_valid(), guard.lost().is_lost());
            let written = if fenced {
                register.write_fenced(value + 1, fence, HOLDER).await == Fenced::Accepted
            } else {
                register.write(value + 1).await;
                true
            };
            println!("WROTE {written}");
        }
        Some("clock") => {
            let redlock = handle(&args[1..]).await;
            let options = LockOptions::default().ttl(Duration::from_secs(10));
            let guard = redlock.lock_with("rl11", &options).await.unwrap();
            let (t0, r0) = (Instant::now(), guard.remaining_validity());
            println!("HELD");
            while let Ok(Some(_)) = lines.next_line().await {
                let now = guard.remaining_validity() + t0.elapsed();
                let deviation = now.abs_diff(r0).as_micros();
                let wall = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                println!("CHECK {deviation} {} {wall}", guard.is_valid());
            }
            guard.release().await.unwrap();
        }
        _ => {
            eprintln!(
                "usage: holder pause <store> <register> <0|1> <nodes>... | holder clock <nodes>..."
            );
            std::process::exit(2);
        }
    }
}

async fn handle(urls: &[String]) -> Redlock {
    Redlock::builder().nodes(urls).build().await.unwrap()
}
