//! The events feed: `GET /v1/events` for the event types that can change a
//! verdict ([`EVENT_TYPES`]), one page at a time, newest first. Only what
//! the events job needs crosses the boundary ([`PaymentIntentEvent`]): the
//! event's id, type and `created`, the PaymentIntent it names, and, for a
//! PaymentIntent event, the status and metadata its embedded object showed.
//! The embedded object is rendered in the API version the event was created
//! with, not the pinned one, so only fields that are the same in every
//! version are read (`id`, `object`, `status`, `payment_status`, `metadata`,
//! `payment_intent`: `crate::stripe::wire`'s event model);
//! the job re-reads the PaymentIntent before deciding anything.
//!
//! - `types`: [`EventType`] and [`EventObject`], and the `types[]` lists.
//! - `page`: [`EventPage`], [`PaymentIntentEvent`], [`SessionEvent`].
//! - `parse`: a page's body into an [`EventPage`], through the typed wire
//!   model of the envelope and the list.

mod page;
mod parse;
mod types;

pub use page::{EventPage, PaymentIntentEvent, SessionEvent};
pub use types::{EventObject, EventType, EVENT_TYPES, PAYMENT_INTENT_EVENT_TYPES};

use super::account::AccountId;
use super::counting::Endpoint;
use super::error::GatewayError;
use super::gateway::StripeGateway;
use super::parsing::json_body;
use super::transport::MAX_LIST_BODY_BYTES;
use parse::parse_page;

/// Events per page (Stripe's maximum).
pub const EVENTS_PAGE_LIMIT: u32 = 100;

impl StripeGateway {
    /// Reads one page of the events of [`EVENT_TYPES`] of `account` (a
    /// connected account, sent as `Stripe-Account`; `None`: the platform's
    /// own feed) created in
    /// `[created_gte, created_lt)` (Unix seconds; no upper bound when
    /// `created_lt` is `None`), newest first, older than `starting_after` when
    /// given: `GET /v1/events?types[]=...&created[gte]=..[&created[lt]=..]
    /// &limit=100[&starting_after=evt_...]` (Stripe's list filters on
    /// `created`), under the shared rate limit and retry rule.
    ///
    /// # Errors
    /// - [`GatewayError::Rejected`]: 401/403 (a restricted key needs read
    ///   access to Events).
    /// - [`GatewayError::Misconfigured`]: a 404 that is Stripe's unknown URL.
    /// - [`GatewayError::AccountUnreachable`]: with `account`, Stripe says the
    ///   platform has no access to it.
    /// - [`GatewayError::Unavailable`]: timeouts, 429, 5xx, a body that is not
    ///   a Stripe list, after the retry budget.
    #[tracing::instrument(name = "stripe.events", level = "debug", skip_all, fields(stripe_account = account.map(AccountId::as_str), created_gte, created_lt, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn payment_intent_events_in(
        &self,
        account: Option<&AccountId>,
        created_gte: i64,
        created_lt: Option<i64>,
        starting_after: Option<&str>,
    ) -> Result<EventPage, GatewayError> {
        let mut url = self.v1(&["events"]);
        {
            let mut q = url.query_pairs_mut();
            for t in EVENT_TYPES {
                q.append_pair("types[]", t);
            }
            q.append_pair("created[gte]", &created_gte.to_string());
            if let Some(lt) = created_lt {
                q.append_pair("created[lt]", &lt.to_string());
            }
            q.append_pair("limit", &EVENTS_PAGE_LIMIT.to_string());
            if let Some(after) = starting_after {
                q.append_pair("starting_after", after);
            }
        }
        self.request_capped(
            Endpoint::Events,
            &url,
            account,
            MAX_LIST_BODY_BYTES,
            |headers, body| parse_page(&json_body(headers, body)?),
        )
        .await
    }
}
