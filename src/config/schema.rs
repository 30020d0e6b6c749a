//! How the application's `payments` table is read (docs/design.md, "Any
//! application's table"): the optional columns, the amount's unit, the status
//! words, the partition and how its timestamps are read. Parsed by the `rules`, `statuses` and
//! `partition` groups; `store::payments` reads by it.

use super::{AmountUnit, ColumnName, Partition, PaymentTimes, StatusMap};
use crate::key::KeyType;

/// The shape of the application's `payments` table as configured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SchemaSettings {
    /// `RECONCILER_AMOUNT_COLUMN`: a `payments` column holding the amount in
    /// minor units, compared with the PaymentIntent's `amount`. Default unset.
    pub amount_column: Option<ColumnName>,
    /// `RECONCILER_CURRENCY_COLUMN`: a `payments` column holding the ISO
    /// currency code, compared case-insensitively. Default unset.
    pub currency_column: Option<ColumnName>,
    /// `RECONCILER_ACCOUNT_COLUMN`: a text column of `payments` holding the
    /// connected account id (`acct_…`; NULL or empty = the platform's own
    /// account); every Stripe read for such a row carries `Stripe-Account`
    /// (docs/connect.md). Default unset: every row is the platform's.
    pub account_column: Option<ColumnName>,
    /// `RECONCILER_CHECKOUT_SESSION_COLUMN`: a text column of `payments`
    /// holding the row's Checkout Session id (`cs_…`); a row with no
    /// PaymentIntent id (NULL or empty) is judged by its session, then by
    /// the session's PaymentIntent (docs/checkout-sessions.md).
    /// Default unset: every row is judged by its PaymentIntent id.
    pub checkout_session_column: Option<ColumnName>,
    /// `RECONCILER_AMOUNT_UNIT`: `minor` (default, integer column) or `major`
    /// (numeric column, converted with Stripe's currency exponents; needs
    /// `RECONCILER_CURRENCY_COLUMN`).
    pub amount_unit: AmountUnit,
    /// `RECONCILER_LOCAL_STATUSES`: the application's words for the
    /// canonical local states (default `pending=pending;paid=paid;failed=failed`).
    pub statuses: StatusMap,
    /// `RECONCILER_PARTITION_COLUMN` and `RECONCILER_PARTITION_VALUE`: the
    /// rows of `payments` this job owns (default unset: every row). Needs a
    /// `RECONCILER_JOB` of its own (the default name is refused).
    pub partition: Option<Partition>,
    /// `RECONCILER_TIMESTAMP_ZONE` and the types of `payments.created_at`
    /// and `updated_at` (detected at start: a `timestamp without time zone`
    /// is read in the zone, default `UTC`).
    pub times: PaymentTimes,
    /// `payments.id`'s type and how the cycle walks it: not a variable,
    /// detected from the catalog at start (`lifecycle::preflight::checked`,
    /// docs/keys.md). Default `bigint`, walked in key order.
    pub key: KeyType,
}
