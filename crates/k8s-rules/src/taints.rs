//! Taints and tolerations (`v1.Toleration.ToleratesTaint` and the TaintToleration filter):
//! a pod may land on a node when every `NoSchedule` and `NoExecute` taint is tolerated;
//! `PreferNoSchedule` only weighs in scoring.

use k8s_openapi::api::core::v1 as core;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<TaintEffect> {
        Some(match s {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
    /// Whether a taint with this effect keeps untolerating pods off the node.
    pub fn blocks_scheduling(self) -> bool {
        matches!(self, TaintEffect::NoSchedule | TaintEffect::NoExecute)
    }
}

#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    /// The API form; `None` for an effect Kubernetes does not know (it taints nothing).
    pub fn from_k8s(t: &core::Taint) -> Option<Taint> {
        Some(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: TaintEffect::parse(&t.effect)?,
        })
    }
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Toleration {
    /// Empty: every key (with `Exists`).
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None`: every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// The API form; `None` when the operator or effect is unknown, since upstream such a
    /// toleration tolerates nothing.
    pub fn from_k8s(t: &core::Toleration) -> Option<Toleration> {
        let operator = match t.operator.as_deref().unwrap_or_default() {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            _ => return None,
        };
        let effect = match t.effect.as_deref().unwrap_or_default() {
            "" => None,
            e => Some(TaintEffect::parse(e)?),
        };
        Some(Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator,
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    /// `ToleratesTaint`: effect (if set) and key (if set) must match; `Exists` then tolerates
    /// any value, `Equal` needs the same value.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first `NoSchedule`/`NoExecute` taint no toleration tolerates.
pub fn untolerated_taint<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect.blocks_scheduling())
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// Convert API taints and tolerations, dropping those Kubernetes would ignore.
pub fn taints_from_k8s(taints: &[core::Taint]) -> Vec<Taint> {
    taints.iter().filter_map(Taint::from_k8s).collect()
}

pub fn tolerations_from_k8s(tolerations: &[core::Toleration]) -> Vec<Toleration> {
    tolerations
        .iter()
        .filter_map(Toleration::from_k8s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
    fn tol(
        key: &str,
        op: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn tolerations_follow_upstream() {
        use TaintEffect::*;
        use TolerationOperator::*;
        let gpu = taint("nvidia.com/gpu", "", NoSchedule);
        assert!(tol("nvidia.com/gpu", Exists, "", None).tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", Exists, "", Some(NoSchedule)).tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", Exists, "", Some(NoExecute)).tolerates(&gpu));
        assert!(
            tol("", Exists, "", None).tolerates(&gpu),
            "empty key + Exists: all"
        );
        assert!(!tol("nvidia.com/gpu", Equal, "x", None).tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", Equal, "", None).tolerates(&gpu));
        let kv = taint("k", "v", NoExecute);
        assert!(tol("k", Equal, "v", None).tolerates(&kv));
        assert!(!tol("k", Equal, "w", None).tolerates(&kv));
        assert!(!tol("other", Exists, "", None).tolerates(&kv));
    }

    #[test]
    fn only_hard_effects_block() {
        let taints = [
            taint("soft", "", TaintEffect::PreferNoSchedule),
            taint("hard", "", TaintEffect::NoSchedule),
        ];
        assert_eq!(
            untolerated_taint(&taints, &[]).map(|t| t.key.as_str()),
            Some("hard")
        );
        let ok = [tol("hard", TolerationOperator::Exists, "", None)];
        assert_eq!(untolerated_taint(&taints, &ok), None);
    }

    #[test]
    fn unknown_operators_and_effects_tolerate_nothing() {
        let t: core::Toleration =
            serde_json::from_str(r#"{"key": "k", "operator": "Lt", "value": "1"}"#).expect("json");
        assert_eq!(Toleration::from_k8s(&t), None);
        let t: core::Toleration =
            serde_json::from_str(r#"{"operator": "Exists", "effect": "Sometimes"}"#).expect("json");
        assert_eq!(Toleration::from_k8s(&t), None);
        let t: core::Taint =
            serde_json::from_str(r#"{"key": "k", "effect": "Odd"}"#).expect("json");
        assert_eq!(Taint::from_k8s(&t), None);
    }
}
