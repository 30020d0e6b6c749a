//! One batch of events (a slice of a feed, or PaymentIntents held by earlier
//! runs): look the rows up ([`super::lookup`]), ask Stripe with no
//! transaction open ([`super::ask_stripe`]), commit everything with the
//! feed's position ([`super::write`]), count it. A batch abandoned before its
//! commit (shutdown, an error, the held PaymentIntents' time) writes nothing;
//! the next run reads it again.

use std::collections::HashSet;

use super::ask_stripe::{ask_stripe, Answers};
use super::feed::SliceEvents;
use super::groups::EventsContext;
use super::lookup::{look_up, Looked};
use super::plan::{self, RowAction};
use super::sessions;
use super::source::{Feed, Source, Worked};
use super::summary::EventsSummary;
use super::write::{write, Written};
use super::EventsError;
use crate::reconcile::Verdict;
use crate::stripe::PaymentIntentEvent;

/// What a run carries from one slice to the next.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// PaymentIntents read from Stripe (or held for another read) by a
    /// committed slice of this run: a later event about one of them needs no
    /// second read (the read came after every event of the window). One
    /// decided without a read (a row confirmed after the earlier event, no
    /// row and not succeeded) is planned again with the later event.
    handled: HashSet<String>,
}

/// Handles one slice read whole from `feed` (a [`Source::Slice`] of the
/// platform's feed or a connected account's) and commits it with the
/// position at the slice's end; its PaymentIntents that could not be
/// decided are held for the next runs, and those already held are left to
/// the held share.
///
/// # Errors
/// [`crate::outcome::RunError::Interrupted`] on shutdown before the commit (nothing of the
/// slice is written), the scan's guards ([`crate::outcome::RunError`]) otherwise.
#[tracing::instrument(name = "events.slice", skip_all, fields(events = read.len()))]
pub(super) async fn slice(
    ctx: &EventsContext<'_>,
    feed: Feed<'_>,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    work(ctx, feed, read, progress, summary).await.map(|_| ())
}

/// One batch of events: look the rows up, ask Stripe with no transaction
/// open, commit everything with the feed's position, count it.
pub(super) async fn work(
    ctx: &EventsContext<'_>,
    feed: Feed<'_>,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<Worked, EventsError> {
    let sessions = sessions::look_up(ctx, &read.sessions, &progress.handled).await?;
    let mut events: Vec<PaymentIntentEvent> = read
        .events
        .iter()
        .filter(|e| !sessions.payment_intents.contains(e.payment_intent.as_str()))
        .cloned()
        .collect();
    events.extend(sessions.as_payment_intents);
    let collapsed = plan::collapse(&events);
    // A slice leaves the PaymentIntents already held to the held share.
    let leave_held = matches!(feed.source, Source::Slice(..));
    let looked = look_up(ctx, &collapsed, &progress.handled, leave_held).await?;
    let Some(mut answers) = ask_stripe(ctx, feed, &looked, sessions.rows).await? else {
        return Ok(Worked::OutOfTime);
    };
    let written = write(ctx, feed, &read, &looked, &mut answers).await?;
    progress
        .handled
        .extend(looked.plan.read_or_held(&looked.rows, &written.held));
    progress.handled.extend(sessions.handled);
    progress.handled.extend(sessions.payment_intents);
    tally(summary, feed, &read, &looked, &answers, &written);
    Ok(Worked::Done)
}

/// Phase 4: what the batch did, counted once it is committed.
fn tally(
    summary: &mut EventsSummary,
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &Answers,
    written: &Written,
) {
    let plan = &looked.plan;
    let (reads, observations) = (answers.reads, &answers.observations);
    match feed.source {
        Source::Slice(..) => {
            summary.slices += 1;
            summary.events_read += read.len() as u64;
            let left = &looked.left_to_held;
            summary.events_left_to_held += read
                .events
                .iter()
                .filter(|e| left.iter().any(|h| h.payment_intent == e.payment_intent))
                .count() as u64;
        }
        Source::Retry { .. } => summary.retries_read += looked.named.len() as u64,
    }
    summary.payment_intents_held += written.to_hold as u64;
    summary.events_skipped += read.skipped as u64;
    summary.events_without_payment_intent += read.without_payment_intent as u64;
    summary.payment_intents += looked.named.len() as u64;
    summary.payment_intents_retrieved += reads as u64;
    summary.rows_confirmed += plan.count(RowAction::Confirmed) as u64;
    let in_grace = plan.count(RowAction::InGrace);
    summary.rows_in_grace += in_grace as u64;
    summary.orphans_foreign += plan.foreign as u64;
    for _ in 0..in_grace {
        summary.verdicts.add(Verdict::InFlight);
    }
    for o in observations {
        summary.verdicts.add(o.decision.verdict);
    }
    let (report, orphans) = (&written.report, &written.orphans);
    summary.findings_created += report.findings_created + orphans.created;
    summary.missing_locally_created += orphans.created;
    summary.commands_enqueued += report.commands_enqueued;
    summary.writes_refused += report.writes_refused;
    summary.findings_cleared += report.findings_cleared + orphans.cleared;
    // The platform's feed: the connected accounts' positions are their own.
    if written.covered_until.is_some() && feed.account.is_none() {
        summary.covered_until = written.covered_until;
    }
}
