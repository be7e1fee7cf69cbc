//! Property tests pinning the rules to Kubernetes' documented semantics.

mod affinity_props;
mod duration_props;
mod quantity_props;
mod selector_props;
