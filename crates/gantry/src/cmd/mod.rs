//! One module per subcommand.

pub mod admission;
pub mod bench;
pub mod crds;
pub mod demo;
pub mod explain;
pub mod in_process;
pub mod logging;
pub mod node;
pub mod operator;
pub mod scheduler;
pub mod sim;
pub mod up;
pub mod validate;
