//! How `payments.created_at` and `payments.updated_at` are read
//! (docs/operations.md, "Rails timestamps"):
//! `timestamptz` is an instant; `timestamp without time zone` (the Rails
//! default, `timestamp(6)`) is a wall-clock time, read as one in
//! `RECONCILER_TIMESTAMP_ZONE` (default `UTC`, what Rails writes) whatever
//! the session's `TimeZone`. The column types are detected at start
//! (`store::payments::time_columns`); every query then reads such a column
//! as `(p.col AT TIME ZONE '<zone>')`, an instant. Nothing the reconciler
//! creates (index, view, constraint) depends on that expression.

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;

const ZONE_VAR: &str = "RECONCILER_TIMESTAMP_ZONE";
/// The longest zone name accepted, in bytes (IANA names are under 40).
const MAX_ZONE_BYTES: usize = 64;

/// `RECONCILER_TIMESTAMP_ZONE`: an IANA zone name (`Europe/Paris`), `UTC`,
/// or a POSIX offset (`+02`), checked for its characters when read (so it
/// can be put into SQL as a literal: letters, digits, `/ _ + - : .`) and by
/// the database at start (`pg_timezone_names` decides what it knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampZone(String);

impl Default for TimestampZone {
    fn default() -> Self {
        TimestampZone("UTC".to_owned())
    }
}

impl TimestampZone {
    /// Validates `name` (trimmed).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `RECONCILER_TIMESTAMP_ZONE`.
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        let name = name.trim();
        let ok = !name.is_empty()
            && name.len() <= MAX_ZONE_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/_+-:.".contains(&b));
        if ok {
            Ok(TimestampZone(name.to_owned()))
        } else {
            Err(invalid(
                ZONE_VAR,
                format!(
                    "{name:?} is not a time zone name (e.g. UTC, Europe/Paris, America/New_York)"
                ),
            ))
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as an SQL string literal (safe: it holds no quote).
    pub fn literal(&self) -> String {
        format!("'{}'", self.0)
    }
}

/// The SQL type of one of the application's time columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeColumn {
    /// `timestamp with time zone` (and the default before detection): an
    /// instant, read as it is.
    #[default]
    Instant,
    /// `timestamp without time zone`: a wall-clock time in the zone.
    WallClock,
}

/// How the application's `created_at` and `updated_at` are read: their
/// detected types and the zone of the wall-clock ones.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PaymentTimes {
    /// `RECONCILER_TIMESTAMP_ZONE` (default `UTC`).
    pub zone: TimestampZone,
    /// The type of `payments.created_at` (detected at start).
    pub created_at: TimeColumn,
    /// The type of `payments.updated_at` (detected at start).
    pub updated_at: TimeColumn,
}

impl PaymentTimes {
    /// `<alias>.created_at` as a `timestamptz` expression.
    pub fn created(&self, alias: &str) -> String {
        self.instant(self.created_at, alias, "created_at")
    }

    /// `<alias>.updated_at` as a `timestamptz` expression.
    pub fn updated(&self, alias: &str) -> String {
        self.instant(self.updated_at, alias, "updated_at")
    }

    /// Whether either column is a wall-clock time.
    pub fn has_wall_clock(&self) -> bool {
        self.created_at == TimeColumn::WallClock || self.updated_at == TimeColumn::WallClock
    }

    /// A `timestamptz` value (an SQL expression, e.g. a parameter `$2`) in
    /// `created_at`'s own type, for comparisons with the bare column that an
    /// index on `payments.created_at` can serve: the value itself for a
    /// `timestamptz` column, its wall-clock time in the zone for a
    /// `timestamp without time zone` one.
    pub fn created_bound(&self, value: &str) -> String {
        match self.created_at {
            TimeColumn::Instant => format!("{value}::timestamptz"),
            TimeColumn::WallClock => {
                format!(
                    "({value}::timestamptz AT TIME ZONE {})",
                    self.zone.literal()
                )
            }
        }
    }

    fn instant(&self, column: TimeColumn, alias: &str, name: &str) -> String {
        match column {
            TimeColumn::Instant => format!("{alias}.{name}"),
            TimeColumn::WallClock => {
                format!("({alias}.{name} AT TIME ZONE {})", self.zone.literal())
            }
        }
    }
}

#[derive(Deserialize)]
struct ZoneVars {
    timestamp_zone: Option<String>,
}

/// Parses `RECONCILER_TIMESTAMP_ZONE` (unset or empty: `UTC`).
///
/// # Errors
/// [`ConfigError`] naming the variable.
pub(super) fn parse<I>(vars: I) -> Result<TimestampZone, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: ZoneVars = value::read(Some("RECONCILER_"), vars)?;
    match raw.timestamp_zone.filter(|z| !z.trim().is_empty()) {
        None => Ok(TimestampZone::default()),
        Some(zone) => TimestampZone::parse(&zone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_names_never_sql() {
        assert_eq!(
            TimestampZone::parse(" Europe/Paris ").unwrap().as_str(),
            "Europe/Paris"
        );
        assert_eq!(
            TimestampZone::parse("Etc/GMT+5").unwrap().literal(),
            "'Etc/GMT+5'"
        );
        for bad in [
            "",
            "UTC'; DROP TABLE payments; --",
            "Europe Paris",
            &"A".repeat(65),
        ] {
            let e = TimestampZone::parse(bad).unwrap_err();
            assert_eq!(e.var(), Some(ZONE_VAR), "{bad:?}");
        }
    }

    #[test]
    fn wall_clock_columns_are_read_in_the_zone() {
        let times = PaymentTimes {
            zone: TimestampZone::parse("Asia/Tokyo").unwrap(),
            created_at: TimeColumn::WallClock,
            updated_at: TimeColumn::Instant,
        };
        assert_eq!(
            times.created("p"),
            "(p.created_at AT TIME ZONE 'Asia/Tokyo')"
        );
        assert_eq!(times.updated("p"), "p.updated_at");
        assert!(times.has_wall_clock());
        assert!(!PaymentTimes::default().has_wall_clock());
    }
}
