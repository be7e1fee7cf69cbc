//! Kubernetes rules that the scheduler, the operator, the sim and the node agents share, so
//! the simulator cannot drift from the product. Pure functions over plain values; each rule
//! follows the upstream Go code it names (apimachinery, component-helpers, Go's `time`).
//!
//! - [`names`]: label keys and values, DNS subdomains (apimachinery `validation`)
//! - [`selector`]: label selectors, string form (`-l`, `labelSelector=`) and structured
//! - [`fields`]: field selectors (`fieldSelector=`)
//! - [`affinity`]: required node affinity (`nodeSelector`, `matchExpressions`, `matchFields`)
//! - [`taints`]: taints and tolerations
//! - [`quantity`]: resource quantities (`500m`, `2Gi`, `1e3`)
//! - [`duration`]: Go durations (`1h30m`, `300ms`)
//! - [`mig`]: the MIG strategy (`none`, `single`, `mixed`)
//! - [`depth`]: the nesting limit for request bodies and manifests

pub mod affinity;
pub mod depth;
pub mod duration;
pub mod fields;
pub mod mig;
pub mod names;
pub mod quantity;
pub mod selector;
pub mod taints;

pub use affinity::{NodeSelector, NodeSelectorTerm, RequiredNodeAffinity};
pub use duration::{DurationError, parse_go_duration};
pub use fields::FieldSelector;
pub use mig::MigStrategy;
pub use quantity::{Quantity, QuantityError};
pub use selector::{Operator, Requirement, Selector, SelectorError};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};
