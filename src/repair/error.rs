//! [`RepairError`]: why one repair command could not be applied, and the
//! text a person reads in `outbox.last_error`.

use super::writer::WriteError;
use crate::key::PaymentKey;
use crate::reconcile::FindingKind;
use crate::store::StoreError;

/// Why one repair command could not be applied. The command stays in the
/// outbox for a later run; [`RepairError::last_error`] is the text written
/// into `outbox.last_error`.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The `event_type` is none of [`crate::reconcile::RepairCommand::EVENT_TYPES`].
    #[error("unknown command {0}")]
    UnknownCommand(String),
    /// The payload is not `{"payment_id": .., "finding_id": ..}`.
    #[error("malformed payload")]
    MalformedPayload(#[source] serde_json::Error),
    /// No payment has the payload's `payment_id`.
    #[error("payment {0} does not exist")]
    UnknownPayment(PaymentKey),
    /// No finding has the payload's `finding_id`.
    #[error("finding {0} does not exist")]
    UnknownFinding(i64),
    /// The finding is about another payment, or of a kind the command does
    /// not repair.
    #[error(
        "finding {finding_id} is {kind} for payment {}, not {expected} for payment {payment_id}",
        finding_payment.as_ref().map_or_else(|| "none".to_owned(), |p| p.to_string())
    )]
    WrongFinding {
        /// The payload's `finding_id`.
        finding_id: i64,
        /// The finding's kind, as stored.
        kind: String,
        /// The payment the finding is about (`None`: a PaymentIntent alone).
        finding_payment: Option<Box<str>>,
        /// The kind the command repairs.
        expected: FindingKind,
        /// The payload's `payment_id` (its text).
        payment_id: Box<str>,
    },
    /// `RECONCILER_LOCAL_STATUSES` has no word for a state the command
    /// needs.
    #[error("RECONCILER_LOCAL_STATUSES has no word for {0}")]
    NoWord(crate::reconcile::LocalStatus),
    /// The database failed inside the command's savepoint.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RepairError {
    /// The text for `outbox.last_error`: the error and its direct cause
    /// (the driver's or JSON parser's message), so a person reading the
    /// outbox sees what failed without the logs.
    pub fn last_error(&self) -> String {
        match std::error::Error::source(self) {
            Some(cause) => format!("{self}: {cause}"),
            None => self.to_string(),
        }
    }
}

impl From<WriteError> for RepairError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::UnknownPayment(id) => RepairError::UnknownPayment(id),
            WriteError::NoWord(state) => RepairError::NoWord(state),
            WriteError::Store(e) => RepairError::Store(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::command::RepairPayload;

    #[test]
    fn last_error_names_the_failure_and_its_cause() {
        let payload = serde_json::from_value::<RepairPayload>(serde_json::json!({"payment_id": 1}))
            .map_err(RepairError::MalformedPayload);
        let Err(malformed) = payload else {
            panic!("a payload without finding_id parsed")
        };
        assert_eq!(
            malformed.last_error(),
            "malformed payload: missing field `finding_id`"
        );
        let store = RepairError::from(WriteError::Store(StoreError {
            action: "resolving a finding",
            source: sqlx::Error::RowNotFound,
        }));
        assert_eq!(
            store.last_error(),
            format!(
                "database error while resolving a finding: {}",
                sqlx::Error::RowNotFound
            )
        );
        let wrong = RepairError::WrongFinding {
            finding_id: 7,
            kind: "refunded".into(),
            finding_payment: None,
            expected: FindingKind::MissedSuccess,
            payment_id: "3".into(),
        };
        assert_eq!(
            wrong.last_error(),
            "finding 7 is refunded for payment none, not missed_success for payment 3"
        );
        assert_eq!(
            RepairError::from(WriteError::UnknownPayment(PaymentKey::from(9))).last_error(),
            "payment 9 does not exist"
        );
    }
}
