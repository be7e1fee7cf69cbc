//! What the simulated kubelets and controllers drop from watched objects before keeping them.

use kube::Resource;

/// Drops `metadata.managedFields` (client-go's `TransformStripManagedFields`, which
/// kube-scheduler's and other components' informers apply): nobody in the sim's caches reads
/// them, and they are about as large as the rest of an operand pod. Every cached pod and node
/// would otherwise carry them, which at 1,000 nodes is hundreds of MB (docs/benchmarks.md,
/// issue #42).
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn managed_fields_go_and_the_rest_stays() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("a pod");
        let before = p.clone();
        strip_managed_fields(&mut p);
        assert_eq!(p.metadata.managed_fields, None);
        p.metadata.managed_fields = before.metadata.managed_fields.clone();
        assert_eq!(p, before);
    }
}
