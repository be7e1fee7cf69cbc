//! `/readyz` keeps answering while deeply nested bodies and idle connections hammer the server.

use super::*;

/// The bound for `/readyz` under attack.
const READY_WITHIN: Duration = Duration::from_millis(100);

/// Twenty `/readyz` answers on `client`; each must come within 1 s, and 18 of them within
/// [`READY_WITHIN`]. (The slack is for the test process itself being descheduled on a shared
/// 2-core machine, which no server change prevents; the failure this guards against held
/// every answer for tens of seconds.)
async fn readyz_samples(client: &Client, during: &str) -> Result<Vec<Duration>> {
    let mut took = Vec::new();
    for _ in 0..20 {
        let t = ready_in(client).await?;
        anyhow::ensure!(t < Duration::from_secs(1), "{during}: /readyz took {t:?}");
        took.push(t);
    }
    took.sort();
    let fast = took.iter().filter(|t| **t <= READY_WITHIN).count();
    anyhow::ensure!(
        fast >= 18,
        "{during}: only {fast} of 20 /readyz answers within {READY_WITHIN:?}: {took:?}"
    );
    Ok(took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_during_nesting_and_idle_connection_attacks() -> Result {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Cluster::builder().start().await?;
    let (cp, client) = (env.cp(), env.client().clone());
    ready_in(&client).await?;
    // Two clients keep sending 720 KB `{"a":{"a":...}}` bodies (the freeze: 77 s).
    let refused = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..2)
        .map(|_| {
            let c = client.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok((400, _)) = send(
                        &c,
                        "POST",
                        &format!("{NS}/configmaps"),
                        "application/json",
                        deep(120_000),
                    )
                    .await
                    {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // The attack is under way before and while /readyz is sampled.
    eventually_secs("the nesting attack has started", 30, || async {
        anyhow::Ok(refused.load(Ordering::Relaxed) > 0)
    })
    .await?;
    // Sample in rounds until a round overlapped an answered attack body (a round of 20 fast
    // answers can fall between two slow refusals); every round must meet the bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (took, during) = loop {
        let before = refused.load(Ordering::Relaxed);
        let took = readyz_samples(&client, "nesting attack").await;
        let during = refused.load(Ordering::Relaxed) - before;
        match took {
            Ok(t) if during == 0 && std::time::Instant::now() < deadline => drop(t),
            took => break (took, during),
        }
    };
    attackers.iter().for_each(|a| a.abort());
    let took = took?;
    assert!(
        during > 0,
        "no attack body was answered while /readyz was sampled"
    );
    println!(
        "/readyz during the nesting attack ({during} bodies refused meanwhile): median {:?}, slowest {:?}",
        took[10], took[19]
    );
    // Idle connections that never start TLS: the server keeps answering others.
    let mut idle = Vec::new();
    for _ in 0..500 {
        idle.push(tokio::net::TcpStream::connect(cp.addr()).await?);
    }
    let took = readyz_samples(&cp.client()?, "500 idle connections").await?;
    println!(
        "/readyz on a new client with 500 idle connections open: median {:?}, slowest {:?}",
        took[10], took[19]
    );
    drop(idle);
    Ok(())
}
