//! A driver version change walks the GPU nodes one at a time through the upgrade states.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_version_change_walks_gpu_nodes_one_at_a_time() -> Res<()> {
    let mut env = start(1, json!("25%")).await?;
    settled_on(&env, V1).await?;
    spawn_controller(&mut env, 10);
    let nodes: Api<Node> = Api::all(env.client.clone());
    // In sync from the start: every GPU node is labelled done, the CPU node is left alone.
    eventually_secs("all GPU nodes upgrade-done on v1", 60, || async {
        let l = nodes.list(&ListParams::default()).await;
        l.is_ok_and(|l| {
            l.items.iter().all(|n| {
                let gpu = GPU_NODES.contains(&n.metadata.name.as_deref().unwrap_or(""));
                (state_of(n) == UpgradeState::UpgradeDone) == gpu
            })
        })
    })
    .await?;
    env.tasks.push(binder(&env.client));
    gpu_jobs(&env.client).await?;
    eventually_secs("six GPU pods running", 60, || async {
        running_gpu_pods(&env.client).await.len() == 6
    })
    .await?;
    let before: Vec<String> = running_gpu_pods(&env.client)
        .await
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let (rec, t) = record(&env.client);
    env.tasks.push(t);
    // The recorder must be watching before the change, or it could miss the first states.
    eventually_secs(
        "the recorder sees every GPU node upgrade-done",
        60,
        || async {
            let now: Vec<_> = GPU_NODES.iter().map(|n| node_state(&rec, n)).collect();
            if now.iter().all(|s| *s == Some(UpgradeState::UpgradeDone)) {
                Look::Done(())
            } else {
                Look::Seen(format!("{now:?}"))
            }
        },
    )
    .await?;

    change_driver_version(&env.client, V2).await?;
    let want = driver_image(V2);
    eventually_secs("every GPU node upgraded to v2", 120, || async {
        let imgs = driver_images(&env.client).await;
        let done = nodes.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items
                .iter()
                .filter(|n| GPU_NODES.contains(&n.metadata.name.as_deref().unwrap_or("")))
                .all(|n| state_of(n) == UpgradeState::UpgradeDone && !unschedulable(n))
        });
        done && GPU_NODES.iter().all(|n| imgs.get(*n) == Some(&want))
    })
    .await?;

    use UpgradeState::*;
    let full_walk = vec![
        UpgradeDone,
        UpgradeRequired,
        CordonRequired,
        WaitForJobsRequired,
        PodDeletionRequired,
        PodRestartRequired,
        ValidationRequired,
        UncordonRequired,
        UpgradeDone,
    ];
    // The recorder's watch may lag the reads above: wait until it has seen every walk end.
    eventually_secs(
        "the recorder sees every GPU node's walk end",
        60,
        || async {
            let Ok(rec) = rec.lock() else {
                return Look::Seen("recorder poisoned".into());
            };
            let ended = GPU_NODES.iter().all(|n| {
                rec.walks
                    .get(*n)
                    .is_some_and(|w| w.len() > 1 && w.last() == Some(&UpgradeDone))
            });
            if ended {
                Look::Done(())
            } else {
                Look::Seen(format!("walks {:?}", rec.walks))
            }
        },
    )
    .await?;
    {
        let rec = rec.lock().map_err(|_| "recorder poisoned")?;
        for n in GPU_NODES {
            assert_eq!(rec.walks.get(n), Some(&full_walk), "walk of {n}");
        }
        assert_eq!(rec.max_in_flight, 1, "never two nodes in flight");
        assert!(
            !rec.walks
                .get("cpu-0")
                .is_some_and(|w| w.iter().any(|s| *s != Unknown))
        );
    }
    // The GPU work was evicted and came back elsewhere: none of the original pods survive, six
    // replacements run, and nothing is left cordoned.
    eventually_secs("six GPU pods running again", 60, || async {
        let now = running_gpu_pods(&env.client).await;
        now.len() == 6
            && now
                .iter()
                .all(|p| p.metadata.uid.as_ref().is_some_and(|u| !before.contains(u)))
    })
    .await?;
    for n in GPU_NODES {
        eventually_secs(
            &format!("{n} uncordoned, without upgrade annotations"),
            60,
            || async {
                let node = nodes.get(n).await?;
                let cordoned = unschedulable(&node);
                let anns = node.metadata.annotations.unwrap_or_default();
                let left: Vec<&String> = anns
                    .keys()
                    .filter(|k| k.contains("driver-upgrade"))
                    .collect();
                Ok::<_, kube::Error>(if !cordoned && left.is_empty() {
                    Look::Done(())
                } else {
                    Look::Seen(format!("cordoned {cordoned}, upgrade annotations {left:?}"))
                })
            },
        )
        .await?;
    }
    eventually_secs("the sim's nodes run driver v2", 60, || async {
        let v = sim_driver_versions(&env);
        if v == vec![V2.to_string(); 3] {
            Look::Done(())
        } else {
            Look::Seen(format!("{v:?}"))
        }
    })
    .await?;
    Ok(())
}
