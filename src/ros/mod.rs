//! ULog topics as ROS messages, for the tools that read ROS data: the live Foxglove server and
//! the MCAP and ROS bag exports.
//!
//! - [`ros2`]: a ULog format compiled to a ROS 2 message type ([`Ros2Type`]: its `ros2msg`
//!   schema and the steps that encode a sample), CDR samples, logged strings as
//!   `rcl_interfaces/msg/Log`. The type is the one model both ROS versions share.
//! - [`ros1`]: the same types for ROS 1 (definition text, MD5 sums as genmsg computes them,
//!   the packed serialisation, `rosgraph_msgs/Log`), built on [`ros2`].
//! - [`diagnostics`]: the flight diagnostics' findings as `diagnostic_msgs/msg/DiagnosticArray`
//!   (ROS 2, CDR).
//!
//! Uses the engine ([`crate::ulog`]) and the findings' types ([`crate::diagnose`]).

pub mod diagnostics;
pub mod ros1;
pub mod ros2;

pub use ros2::Ros2Type;
