//! Start, exit and conditional stages: they do nothing and succeed. Routing from a conditional
//! happens in edge selection; goal gates are checked by the scheduler before the exit stage.

use super::{Handler, HandlerError, StageRun};
use crate::outcome::Outcome;

pub struct PassThrough;

#[async_trait::async_trait]
impl Handler for PassThrough {
    async fn run(&self, _stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        Ok(Outcome::success())
    }
}
