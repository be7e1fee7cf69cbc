//! One module per subcommand.

pub mod crds;
pub mod validate;
