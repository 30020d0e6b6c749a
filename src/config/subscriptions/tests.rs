use super::*;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parsed(pairs: &[(&str, &str)]) -> Result<Option<SubscriptionSettings>, ConfigError> {
    parse(vars(pairs))
}

fn column(var: &'static str, name: &str) -> ColumnName {
    ColumnName::parse(var, name).unwrap()
}

#[test]
fn without_the_table_there_is_no_group() {
    assert_eq!(parsed(&[]).unwrap(), None);
    assert_eq!(parsed(&[(TABLE_VAR, " ")]).unwrap(), None);
}

#[test]
fn the_defaults_are_the_contracts() {
    let s = parsed(&[(TABLE_VAR, "subscriptions")]).unwrap().unwrap();
    assert_eq!(s.table.display(), "subscriptions");
    assert_eq!(s.id_column.as_str(), "stripe_subscription_id");
    assert_eq!(
        s.status_column.as_ref().map(ColumnName::as_str),
        Some("status")
    );
    assert_eq!(s.statuses, SubscriptionWords::default());
    assert_eq!(s.created_column.as_str(), "created_at");
    assert_eq!(s.updated_column.as_str(), "updated_at");
    assert_eq!(s.past_due, PastDueAccess::Grant);
    assert!(s.period_end_column.is_none() && s.ends_at_column.is_none());
    assert!(s.price_column.is_none() && s.quantity_column.is_none());
    assert!(s.account_column.is_none());
    assert_eq!(s.columns().len(), 2, "the id and the status");
}

#[test]
fn cashier_pay_and_a_status_less_users_table() {
    let cashier = parsed(&[
        (TABLE_VAR, "public.subscriptions"),
        (ID_VAR, "stripe_id"),
        (STATUS_VAR, "stripe_status"),
        (ENDS_AT_VAR, "ends_at"),
        (PRICE_VAR, "stripe_price"),
        (QUANTITY_VAR, "quantity"),
        (PAST_DUE_VAR, "revoke"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(cashier.table.quoted(), "\"public\".\"subscriptions\"");
    assert_eq!(cashier.past_due, PastDueAccess::Revoke);
    assert_eq!(cashier.policy().past_due, PastDueAccess::Revoke);
    let vars_of: Vec<&str> = cashier.columns().iter().map(|(v, _)| *v).collect();
    assert_eq!(
        vars_of,
        [ID_VAR, STATUS_VAR, ENDS_AT_VAR, PRICE_VAR, QUANTITY_VAR]
    );

    let pay = parsed(&[
        (TABLE_VAR, "pay_subscriptions"),
        (ID_VAR, "processor_id"),
        (PERIOD_END_VAR, "current_period_end"),
        (ENDS_AT_VAR, "ends_at"),
        (
            STATUSES_VAR,
            "active=active;trialing=trialing;canceled=canceled,cancelled;past_due=past_due",
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        pay.period_end_column,
        Some(column(PERIOD_END_VAR, "current_period_end"))
    );
    assert_eq!(
        pay.statuses.status_of("cancelled"),
        Some(&SubscriptionStatus::Canceled)
    );

    let users = parsed(&[
        (TABLE_VAR, "users"),
        (STATUS_VAR, "none"),
        (PERIOD_END_VAR, "plan_renews_at"),
        (ACCOUNT_VAR, "stripe_account"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(users.status_column, None);
    assert_eq!(
        users.account_column,
        Some(column(ACCOUNT_VAR, "stripe_account"))
    );
}

#[test]
fn an_application_word_map() {
    let words = parse_statuses(
        "active=active; trialing = trial ;canceled=cancelled,expired;incomplete_expired=expired_first",
    )
    .unwrap();
    assert_eq!(
        words.status_of("trial"),
        Some(&SubscriptionStatus::Trialing)
    );
    assert_eq!(
        words.status_of("expired"),
        Some(&SubscriptionStatus::Canceled)
    );
    assert_eq!(
        words.first_word(&SubscriptionStatus::Canceled),
        Some("cancelled")
    );
    assert_eq!(words.first_word(&SubscriptionStatus::Unpaid), None);
    assert_eq!(words.status_of("unpaid"), None, "not named: unverifiable");
}

#[test]
fn a_malformed_map_names_the_variable_and_the_fault() {
    for (raw, fault) in [
        (
            "active=active;shipped=sent",
            "not a Stripe subscription status",
        ),
        (
            "active=active;Canceled=x",
            "not a Stripe subscription status",
        ),
        ("active=active;canceled=active", "mapped twice"),
        ("active=active;canceled=", "empty word"),
        ("active=active;active=on", "given twice"),
        ("active", "not status=word"),
        ("trialing=trial;canceled=canceled", "active is missing"),
    ] {
        let e = parse_statuses(raw).unwrap_err();
        assert_eq!(e.var(), Some(STATUSES_VAR), "{raw}");
        assert!(e.to_string().contains(fault), "{raw}: {e}");
    }
}

#[test]
fn bad_input_names_its_variable() {
    const T: (&str, &str) = (TABLE_VAR, "subscriptions");
    for (pairs, var, fault) in [
        (vec![(TABLE_VAR, "a.b.c")], TABLE_VAR, "not a table name"),
        (
            vec![(TABLE_VAR, "subs; drop")],
            TABLE_VAR,
            "not a table name",
        ),
        (vec![T, (ID_VAR, "stripe id")], ID_VAR, "not a column name"),
        (
            vec![T, (PRICE_VAR, "9price")],
            PRICE_VAR,
            "not a column name",
        ),
        (
            vec![T, (PAST_DUE_VAR, "Revoke")],
            PAST_DUE_VAR,
            "not grant or revoke",
        ),
        (
            vec![T, (PAST_DUE_VAR, "deny")],
            PAST_DUE_VAR,
            "not grant or revoke",
        ),
        (
            vec![T, (STATUS_VAR, "none")],
            STATUS_VAR,
            "needs RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN",
        ),
        (
            vec![
                T,
                (STATUS_VAR, "none"),
                (ENDS_AT_VAR, "ends_at"),
                (STATUSES_VAR, "active=on"),
            ],
            STATUSES_VAR,
            "status column",
        ),
        (
            vec![T, (ENDS_AT_VAR, "status")],
            ENDS_AT_VAR,
            "already RECONCILER_SUBSCRIPTION_STATUS_COLUMN",
        ),
        (
            vec![T, (PERIOD_END_VAR, "ends"), (ENDS_AT_VAR, "ends")],
            ENDS_AT_VAR,
            "already",
        ),
        (
            vec![(PRICE_VAR, "price")],
            PRICE_VAR,
            "RECONCILER_SUBSCRIPTIONS_TABLE is not",
        ),
        (
            vec![(PAST_DUE_VAR, "revoke")],
            PAST_DUE_VAR,
            "RECONCILER_SUBSCRIPTIONS_TABLE is not",
        ),
    ] {
        let e = parsed(&pairs).unwrap_err();
        assert_eq!(e.var(), Some(var), "{pairs:?}: {e}");
        assert!(e.to_string().starts_with(var), "{pairs:?}: {e}");
        assert!(e.to_string().contains(fault), "{pairs:?}: {e}");
    }
}

#[test]
fn the_group_reaches_the_settings() {
    let base = ("DATABASE_URL", "postgres://u@localhost/db");
    let none = crate::config::Settings::from_vars(vars(&[base])).unwrap();
    assert_eq!(none.subscriptions, None);
    let s = crate::config::Settings::from_vars(vars(&[
        base,
        (TABLE_VAR, "subscriptions"),
        (PAST_DUE_VAR, "revoke"),
    ]))
    .unwrap();
    let group = s.subscriptions.unwrap();
    assert_eq!(group.table.name(), "subscriptions");
    assert_eq!(group.past_due, PastDueAccess::Revoke);
    let e = crate::config::Settings::from_vars(vars(&[base, (QUANTITY_VAR, "seats")])).unwrap_err();
    assert_eq!(e.var(), Some(QUANTITY_VAR));
}
