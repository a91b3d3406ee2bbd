//! Spot or on-demand, and where, for one job with a deadline.
//!
//! A job has `work` hours of computation to do before its `deadline`; every
//! time a new instance starts (a spot instance, an on-demand one, a switch of
//! region or of kind, a relaunch after a preemption) it first spends `restart`
//! hours loading its checkpoint, which counts as lost progress (the instance is
//! billed, the job does not advance). Spot instances are cheap but are lost
//! whenever their region's availability drops to 0; on-demand instances are
//! never lost. The question, at every tick: stay, wait, take spot (in which
//! region) or take on-demand, at the least cost with the deadline never missed.
//!
//! Everything here is pure: the environment (availability and prices per
//! region per tick) is passed in, no clock is read. The model is the one of the
//! "Can't Be Late" simulator (NSDI'24) as republished by the SkyNomad artifact,
//! so that published figures are comparable:
//!
//! * time is a sequence of ticks of `tick_s` seconds; the job starts at tick 0
//!   and must be done at the end of tick `floor(deadline / tick) - 1`;
//! * at the start of tick `t` a spot instance held during `t - 1` in region `r`
//!   is preempted if region `r` is not available at `t`; its progress of tick
//!   `t - 1` is kept (the job checkpoints);
//! * the policy then chooses what runs during tick `t`: nothing, spot in an
//!   available region, or on-demand in any region; anything that is not the
//!   instance still running is a new instance, with `restart` seconds of
//!   overhead, and, when its region is not the region of the last instance
//!   (where the checkpoint is), the transfer price of the checkpoint;
//! * a running instance is billed for the whole tick (spot at that region's
//!   price of that tick, on-demand at that region's on-demand price) and makes
//!   `max(0, tick - overhead left)` seconds of progress.
//!
//! [`simulate`] runs a [`SpotPolicy`] over that model and enforces the deadline
//! by construction (see [`SpotView::allows`]); [`offline_optimum`] is the exact
//! clairvoyant optimum of the same model (a dynamic programme), the lower bound
//! every policy is measured against.

mod model;
mod optimum;
mod policies;
mod slack;

pub use model::*;
pub use optimum::{offline_optimum, Optimum};
pub use policies::{Greedy, OnDemandOnly, UniformProgress};
pub use slack::SlackAware;

#[cfg(test)]
mod provider_tests;
#[cfg(test)]
mod tests;
