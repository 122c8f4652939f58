//! Test helper: a writer process for the multi-process and crash tests.
//!
//! `yarilo-store-torture <mail_location> <user> <mailbox> <mode> <count> <seed>`
//!
//! Modes: `append` (append only), `append-flag` (append, then flag random
//! messages), `mixed` (append, flag, expunge its own messages). Prints
//! `ACK <uid> <id>` after each durable append (`id` is in the message's
//! `X-Torture-Id` header), `EXPUNGE-START <uid>` / `EXPUNGED <uid>` around
//! expunges, and `DONE` at the end. `count` 0 = run until killed.
//!
//! With `YARILO_TORTURE_LOCKS=host:port[,host:port…]` writers serialize
//! through the remote locks service at those endpoints (failing over in
//! order) instead of an in-process locker.

use std::io::Write;
use std::sync::Arc;

use yarilo_locks::{
    ClientOptions, Endpoint, EventBus, Locker, LocksClient, MemoryEventBus, MemoryLocker,
};
use yarilo_store::{AppendOptions, FlagOp, Flags, Store, StoreSettings, UserInfo};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        eprintln!(
            "usage: {} <mail_location> <user> <mailbox> <append|append-flag|mixed> <count> <seed>",
            args[0]
        );
        std::process::exit(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(&args)) {
        eprintln!("torture: {e}");
        std::process::exit(1);
    }
}

async fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let mode = args[4].as_str();
    let count: u64 = args[5].parse()?;
    let mut seed: u64 = args[6].parse::<u64>()? | 1;
    let mut rnd = move || {
        // xorshift: reproducible per seed.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (locker, events): (Arc<dyn Locker>, Arc<dyn EventBus>) =
        match std::env::var("YARILO_TORTURE_LOCKS") {
            Ok(list) => {
                let mut opts = ClientOptions::single(Endpoint::Tcp(String::new()));
                opts.endpoints = list
                    .split(',')
                    .map(|e| Endpoint::Tcp(e.trim().to_string()))
                    .collect();
                let client = LocksClient::new(opts);
                client.connect().await?;
                let events = client.event_bus();
                (Arc::new(client), Arc::new(events))
            }
            Err(_) => (
                Arc::new(MemoryLocker::new()),
                Arc::new(MemoryEventBus::default()),
            ),
        };
    let store = Store::new(StoreSettings::new(&args[1]), locker, events)?;
    let user = store
        .user(&UserInfo {
            user: args[2].clone(),
            home: String::new(),
        })
        .await?;
    if args[3] != "INBOX" && user.open(&args[3]).await.is_err() {
        let _ = user.create(&args[3]).await;
    }
    let mb = user.open(&args[3]).await?;
    let pid = std::process::id();
    let mut own: Vec<u32> = Vec::new();
    let mut out = std::io::stdout();
    let mut i = 0u64;
    while count == 0 || i < count {
        let id = format!("{pid}-{i}");
        let body = format!(
            "From: torture@example.org\r\nSubject: message {id}\r\nX-Torture-Id: {id}\r\n\r\nbody {id}\r\n{}\r\n",
            "x".repeat((rnd() % 2000) as usize)
        );
        let flags = if rnd() % 2 == 0 {
            Flags::SEEN
        } else {
            Flags::EMPTY
        };
        let uid = mb
            .append(
                body.into_bytes(),
                AppendOptions {
                    flags,
                    keywords: vec![],
                    internal_date: None,
                },
            )
            .await?;
        writeln!(out, "ACK {uid} {id}")?;
        out.flush()?;
        own.push(uid);
        if mode != "append" {
            let view = mb.refresh().await?;
            if !view.is_empty() {
                let target = view
                    .by_seq((rnd() % view.len() as u64) as u32 + 1)
                    .map(|r| r.uid);
                if let Some(t) = target {
                    let kw = if rnd() % 3 == 0 {
                        vec!["$Torture".to_string()]
                    } else {
                        vec![]
                    };
                    let op = if rnd() % 2 == 0 {
                        FlagOp::Add
                    } else {
                        FlagOp::Remove
                    };
                    match mb.store_flags(&[t], op, Flags::FLAGGED, &kw, None).await {
                        Ok(_) | Err(yarilo_store::StoreError::NoMessage(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        if mode == "mixed" && own.len() > 3 && rnd() % 4 == 0 {
            let idx = (rnd() % own.len() as u64) as usize;
            let victim = own.swap_remove(idx);
            writeln!(out, "EXPUNGE-START {victim}")?;
            out.flush()?;
            mb.expunge(&[victim]).await?;
            writeln!(out, "EXPUNGED {victim}")?;
            out.flush()?;
        }
        i += 1;
    }
    // Locks released by the last operations must reach the service before
    // the process exits, or they stay held until their TTL.
    yarilo_locks::flush_releases(std::time::Duration::from_secs(5)).await;
    writeln!(out, "DONE")?;
    Ok(())
}
