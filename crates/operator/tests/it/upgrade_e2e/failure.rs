//! An injected driver failure parks its node in `upgrade-failed` while the rest finish.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_driver_parks_its_node_and_the_rest_finish() -> Res<()> {
    // maxUnavailable 2 of 3: the parked (still cordoned) node leaves room for one more.
    let mut env = start(1, json!(2)).await?;
    settled_on(&env, V1).await?;
    eventually_secs("the sim's nodes run driver v1", 60, || async {
        sim_driver_versions(&env) == vec![V1.to_string(); 3]
    })
    .await?;
    spawn_controller(&mut env, 2);
    let rec = record_from_done(&mut env).await?;
    let bad = GPU_NODES[0];
    env.cluster.sim()?.fault(bad, &Fault::DriverFail).await?;
    change_driver_version(&env.client, V2).await?;
    eventually_secs(
        "the broken node failed and the others finished",
        120,
        || async {
            node_state(&rec, bad) == Some(UpgradeState::UpgradeFailed)
                && GPU_NODES[1..]
                    .iter()
                    .all(|n| node_state(&rec, n) == Some(UpgradeState::UpgradeDone))
                && sim_driver_versions(&env)[1..] == [V2.to_string(), V2.to_string()]
        },
    )
    .await?;
    let nodes: Api<Node> = Api::all(env.client.clone());
    assert!(
        unschedulable(&nodes.get(bad).await?),
        "a failed node stays cordoned"
    );
    for n in &GPU_NODES[1..] {
        assert!(!unschedulable(&nodes.get(n).await?), "{n} left cordoned");
        let walk = rec.lock().map_err(|_| "recorder poisoned")?.walks[*n].clone();
        assert_eq!(walk.last(), Some(&UpgradeState::UpgradeDone));
        assert!(
            walk.contains(&UpgradeState::ValidationRequired),
            "{n}: {walk:?}"
        );
    }
    {
        let r = rec.lock().map_err(|_| "recorder poisoned")?;
        assert_eq!(r.max_in_flight, 1, "never two nodes in flight");
        assert!(
            r.walks[bad].contains(&UpgradeState::PodRestartRequired),
            "{:?}",
            r.walks[bad]
        );
    }

    // The driver is fixed: the new driver pod comes up and the node recovers on its own.
    env.cluster.sim()?.fault(bad, &Fault::DriverOk).await?;
    eventually_secs("the failed node recovers", 120, || async {
        node_state(&rec, bad) == Some(UpgradeState::UpgradeDone)
    })
    .await?;
    assert!(
        !unschedulable(&nodes.get(bad).await?),
        "recovered node uncordoned"
    );
    eventually_secs("the recovered node runs v2", 60, || async {
        sim_driver_versions(&env) == vec![V2.to_string(); 3]
    })
    .await?;
    Ok(())
}
