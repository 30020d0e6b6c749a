//! [`SubscriptionTable`]: what the start-up checks learned of the
//! application's subscriptions table (`RECONCILER_SUBSCRIPTIONS_TABLE`,
//! docs/subscriptions.md): its key's type and each configured column with
//! how its values are read and written. Only names that passed the
//! settings' identifier rule and the catalogue's check reach these strings.

/// How one of the application's time columns holds an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeStorage {
    /// `timestamp with time zone`.
    Instant,
    /// `timestamp without time zone` (Rails), a wall-clock time in the zone
    /// (`RECONCILER_TIMESTAMP_ZONE`, an SQL literal).
    WallClock(String),
    /// An integer of seconds since the epoch (Stripe's own form).
    Epoch,
}

/// One configured column: its quoted name and SQL type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The name, double-quoted for SQL.
    pub quoted: String,
    /// The name as configured (for messages).
    pub name: String,
    /// Its type as `format_type` spells it (e.g. `text`, a PostgreSQL enum's name).
    pub sql_type: String,
}

/// A configured time column and how it stores an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeColumn {
    /// The column.
    pub column: Column,
    /// How it holds an instant.
    pub storage: TimeStorage,
}

impl TimeColumn {
    /// `<alias>.<column>` as whole seconds since the epoch (`bigint`).
    pub fn epoch(&self, alias: &str) -> String {
        let c = format!("{alias}.{}", self.column.quoted);
        match &self.storage {
            TimeStorage::Instant => format!("floor(extract(epoch FROM {c}))::bigint"),
            TimeStorage::WallClock(zone) => {
                format!("floor(extract(epoch FROM ({c} AT TIME ZONE {zone})))::bigint")
            }
            TimeStorage::Epoch => format!("{c}::bigint"),
        }
    }

    /// The value to write for `param` (an SQL `bigint` of epoch seconds, or
    /// NULL), in the column's own type.
    pub fn from_epoch(&self, param: &str) -> String {
        match &self.storage {
            TimeStorage::Instant => format!("to_timestamp({param}::bigint)"),
            TimeStorage::WallClock(zone) => {
                format!("(to_timestamp({param}::bigint) AT TIME ZONE {zone})")
            }
            TimeStorage::Epoch => format!("({param}::bigint)::{}", self.column.sql_type),
        }
    }
}

/// The application's subscriptions table as checked at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionTable {
    /// The table, quoted (`"schema"."table"` or `"table"`).
    pub table: String,
    /// The table as configured (for messages).
    pub display: String,
    /// The key column (`id`), and its SQL type: the cursor walks it in that
    /// type's order; findings keep it as text.
    pub key: Column,
    /// The column holding `sub_…`.
    pub stripe_id: Column,
    /// The status column; `None` for `none`.
    pub status: Option<Column>,
    /// When the application believes the paid period ends.
    pub period_end: Option<TimeColumn>,
    /// When the application will end access.
    pub ends_at: Option<TimeColumn>,
    /// The price id column.
    pub price: Option<Column>,
    /// The seats column.
    pub quantity: Option<Column>,
    /// When the row was made (list windows).
    pub created: Option<TimeColumn>,
    /// Last change (the grace window).
    pub updated: Option<TimeColumn>,
    /// The connected account per row.
    pub account: Option<Column>,
    /// Whether the table is partitioned (its lookup index is built per partition).
    pub partitioned: bool,
}
