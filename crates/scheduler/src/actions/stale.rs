//! stalegangeviction: a gang that runs with fewer pods than its minimum for longer than its
//! grace period is evicted whole, so its remaining pods stop holding resources.

use crate::decisions::{EvictReason, StaleMark};
use crate::framework::Session;
use crate::framework::statement::Statement;
use crate::snapshot::GroupId;

pub fn run(sess: &mut Session<'_>) {
    let now = sess.snapshot.now;
    for g in 0..sess.snapshot.groups.len() as GroupId {
        let grp = &sess.snapshot.groups[g as usize];
        if grp.foreign
            || grp.queue.is_none()
            || (grp.stale_since.is_none() && sess.state.gang_satisfied(sess.snapshot, g))
        {
            continue;
        }
        let running = sess.running_pods(g);
        let active = !running.is_empty() || sess.state.group_placed[g as usize] > 0;
        let below = active && !sess.state.gang_satisfied(sess.snapshot, g);
        let mark = |since| StaleMark {
            namespace: grp.namespace.to_string(),
            pod_group: grp.name.to_string(),
            since,
        };
        match (below, grp.stale_since) {
            (false, Some(_)) => sess.stale_marks.push(mark(None)),
            (false, None) => {}
            (true, None) => sess.stale_marks.push(mark(Some(now))),
            (true, Some(since)) => {
                let Some(grace) = grp.staleness_grace else {
                    continue;
                };
                if now - since < grace || running.is_empty() {
                    continue;
                }
                let mut stmt = Statement::new();
                for p in running {
                    stmt.evict(
                        sess.snapshot,
                        &mut sess.state,
                        p,
                        EvictReason::StaleGang {
                            since,
                            grace_secs: grace,
                        },
                    );
                }
                // Pods placed this cycle for the gang stay: they bind and may complete it next cycle.
                sess.commit(stmt);
                let grp = &sess.snapshot.groups[g as usize];
                sess.stale_marks.push(StaleMark {
                    namespace: grp.namespace.to_string(),
                    pod_group: grp.name.to_string(),
                    since: None,
                });
            }
        }
    }
}
