//! One module per subcommand.

pub mod bench;
pub mod crds;
pub mod node;
pub mod sim;
pub mod up;
pub mod validate;
