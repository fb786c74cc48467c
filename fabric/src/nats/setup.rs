//! Start-up: creates or checks the streams, tier consumers and buckets of
//! decisions.md#wire-protocol.
//!
//! Every process that connects runs this, so it must be idempotent. A stream, consumer or
//! bucket that exists is compared with what we need. A field our semantics rely on (retention,
//! subjects, storage, filter, ack policy, pull mode) that differs is an error that names the
//! object, the field, both values and the fix: we never silently rebuild a stream, because
//! that would drop its messages. Fields that are tuning (`max_ack_pending`, `ack_wait`,
//! `max_deliver`, the duplicate window, a bucket's `max_age`, replicas) are updated in place.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::{self, AckPolicy, pull};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{ErrorCode, context::GetStreamErrorKind};
use cowork_schema::job::Tier;

use cowork_schema::duration::format_duration;

use crate::nats::config::NatsConfig;
use crate::nats::{
    EVENTS_SUBJECTS, JOBS_SUBJECTS, Mismatch, NatsError, consumer_name, tier_filter,
};

/// The jobs stream we need.
fn jobs_stream_config(config: &NatsConfig) -> stream::Config {
    stream::Config {
        name: config.jobs_stream.clone(),
        description: Some("cowork fleet jobs, one subject per tier and batch".to_owned()),
        subjects: vec![JOBS_SUBJECTS.to_owned()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..stream::Config::default()
    }
}

/// The events stream we need. Its duplicate window stays at JetStream's default (2 min): it
/// only has to cover a worker retrying a publish whose acknowledgement it lost.
fn events_stream_config(config: &NatsConfig) -> stream::Config {
    stream::Config {
        name: config.events_stream.clone(),
        description: Some("cowork fleet job events, one subject per batch".to_owned()),
        subjects: vec![EVENTS_SUBJECTS.to_owned()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: config.replicas,
        ..stream::Config::default()
    }
}

/// The durable pull consumer of `tier`.
fn tier_consumer_config(config: &NatsConfig, tier: Tier) -> pull::Config {
    let name = consumer_name(tier);
    pull::Config {
        durable_name: Some(name.clone()),
        name: Some(name),
        description: Some(format!("cowork workers of tier {}", tier.as_str())),
        filter_subject: tier_filter(tier),
        ack_policy: AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        max_deliver: config.max_deliver,
        max_ack_pending: config.tier_cap(tier),
        ..pull::Config::default()
    }
}

fn bucket_config(config: &NatsConfig, bucket: &str, max_age: Duration) -> kv::Config {
    kv::Config {
        bucket: bucket.to_owned(),
        history: 1,
        max_age,
        storage: StorageType::File,
        num_replicas: config.replicas,
        ..kv::Config::default()
    }
}

/// The differences between a found stream's config and the one we need.
#[derive(Debug, PartialEq)]
enum StreamCheck {
    /// Equal in every field we look at.
    Same,
    /// Only tuning differs; this is the found config with our tuning applied.
    Update(Box<stream::Config>),
}

fn mismatch(
    kind: &'static str,
    name: &str,
    field: &'static str,
    found: String,
    wanted: String,
    fix: String,
) -> NatsError {
    NatsError::Mismatch(Box::new(Mismatch {
        kind,
        name: name.to_owned(),
        field,
        found,
        wanted,
        fix,
    }))
}

fn retention_name(retention: RetentionPolicy) -> &'static str {
    match retention {
        RetentionPolicy::Limits => "limits",
        RetentionPolicy::Interest => "interest",
        RetentionPolicy::WorkQueue => "workqueue",
    }
}

fn storage_name(storage: StorageType) -> &'static str {
    match storage {
        StorageType::File => "file",
        StorageType::Memory => "memory",
    }
}

/// Compares a found stream with the wanted one. `kind` and `fix` name the object in errors;
/// `tune_max_age` says whether `max_age` is ours to set (buckets) or the operator's (streams).
fn check_stream(
    kind: &'static str,
    found: &stream::Config,
    wanted: &stream::Config,
    fix: &str,
    tune_max_age: bool,
) -> Result<StreamCheck, NatsError> {
    let name = &wanted.name;
    if found.retention != wanted.retention {
        return Err(mismatch(
            kind,
            name,
            "retention",
            retention_name(found.retention).to_owned(),
            retention_name(wanted.retention).to_owned(),
            fix.to_owned(),
        ));
    }
    let mut found_subjects = found.subjects.clone();
    found_subjects.sort();
    let mut wanted_subjects = wanted.subjects.clone();
    wanted_subjects.sort();
    if found_subjects != wanted_subjects {
        return Err(mismatch(
            kind,
            name,
            "subjects",
            format!("{found_subjects:?}"),
            format!("{wanted_subjects:?}"),
            fix.to_owned(),
        ));
    }
    if found.storage != wanted.storage {
        return Err(mismatch(
            kind,
            name,
            "storage",
            storage_name(found.storage).to_owned(),
            storage_name(wanted.storage).to_owned(),
            fix.to_owned(),
        ));
    }
    let mut tuned = found.clone();
    // A zero duplicate window in the wanted config means "the server's default": leave it.
    if !wanted.duplicate_window.is_zero() {
        tuned.duplicate_window = wanted.duplicate_window;
    }
    if tune_max_age {
        tuned.max_age = wanted.max_age;
        // The server refuses a duplicate window longer than max_age.
        if !tuned.max_age.is_zero() && tuned.duplicate_window > tuned.max_age {
            tuned.duplicate_window = tuned.max_age;
        }
    }
    tuned.num_replicas = wanted.num_replicas;
    if tuned == *found {
        Ok(StreamCheck::Same)
    } else {
        Ok(StreamCheck::Update(Box::new(tuned)))
    }
}

/// Compares a found consumer with the wanted one; `Some` is the found config with our tuning
/// applied, when the tuning differs.
fn check_consumer(
    stream_name: &str,
    found: &consumer::Config,
    wanted: &pull::Config,
) -> Result<Option<consumer::Config>, NatsError> {
    let name = wanted.durable_name.clone().unwrap_or_default();
    let object = format!("{stream_name}/{name}");
    let fix = format!(
        "delete it (nats consumer rm {stream_name} {name}) so it is created again, or align it by hand"
    );
    if let Some(deliver_subject) = &found.deliver_subject {
        return Err(mismatch(
            "consumer",
            &object,
            "deliver_subject",
            format!("{deliver_subject:?} (a push consumer)"),
            "none (a pull consumer)".to_owned(),
            fix,
        ));
    }
    let found_filter = if found.filter_subject.is_empty() && found.filter_subjects.len() == 1 {
        found.filter_subjects[0].clone()
    } else {
        found.filter_subject.clone()
    };
    if found_filter != wanted.filter_subject || found.filter_subjects.len() > 1 {
        let found_text = if found.filter_subjects.len() > 1 {
            format!("{:?}", found.filter_subjects)
        } else {
            format!("{found_filter:?}")
        };
        return Err(mismatch(
            "consumer",
            &object,
            "filter_subject",
            found_text,
            format!("{:?}", wanted.filter_subject),
            fix,
        ));
    }
    if found.ack_policy != wanted.ack_policy {
        return Err(mismatch(
            "consumer",
            &object,
            "ack_policy",
            format!("{:?}", found.ack_policy).to_lowercase(),
            format!("{:?}", wanted.ack_policy).to_lowercase(),
            fix,
        ));
    }
    if found.ack_wait == wanted.ack_wait
        && found.max_deliver == wanted.max_deliver
        && found.max_ack_pending == wanted.max_ack_pending
    {
        return Ok(None);
    }
    let mut tuned = found.clone();
    tuned.ack_wait = wanted.ack_wait;
    tuned.max_deliver = wanted.max_deliver;
    tuned.max_ack_pending = wanted.max_ack_pending;
    Ok(Some(tuned))
}

fn jetstream_error(
    action: &'static str,
    name: &str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> NatsError {
    NatsError::JetStream {
        action,
        name: name.to_owned(),
        source: Box::new(source),
    }
}

/// The config of the stream `name`, or `None` if it does not exist.
async fn find_stream(jetstream: &Context, name: &str) -> Result<Option<stream::Config>, NatsError> {
    match jetstream.get_stream(name).await {
        Ok(found) => Ok(Some(found.cached_info().config.clone())),
        Err(error) => match error.kind() {
            GetStreamErrorKind::JetStream(inner)
                if inner.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(jetstream_error("reading stream", name, error)),
        },
    }
}

/// Creates the stream, or checks and tunes the existing one.
async fn ensure_stream(
    jetstream: &Context,
    wanted: stream::Config,
    kind: &'static str,
    fix: &str,
    tune_max_age: bool,
) -> Result<(), NatsError> {
    let name = wanted.name.clone();
    let Some(found) = find_stream(jetstream, &name).await? else {
        jetstream
            .create_stream(wanted)
            .await
            .map_err(|error| jetstream_error("creating stream", &name, error))?;
        tracing::info!(stream = %name, "created stream");
        return Ok(());
    };
    match check_stream(kind, &found, &wanted, fix, tune_max_age)? {
        StreamCheck::Same => {}
        StreamCheck::Update(tuned) => {
            jetstream
                .update_stream(*tuned)
                .await
                .map_err(|error| jetstream_error("updating stream", &name, error))?;
            tracing::info!(stream = %name, "updated stream settings");
        }
    }
    Ok(())
}

/// Creates the bucket, or checks and tunes the existing one.
async fn ensure_bucket(jetstream: &Context, wanted: kv::Config) -> Result<(), NatsError> {
    let bucket = wanted.bucket.clone();
    let stream_name = format!("KV_{bucket}");
    let Some(found) = find_stream(jetstream, &stream_name).await? else {
        jetstream
            .create_key_value(wanted)
            .await
            .map_err(|error| jetstream_error("creating bucket", &bucket, error))?;
        tracing::info!(bucket = %bucket, "created bucket");
        return Ok(());
    };
    // Compare on the bucket's stream: what a KV bucket relies on is its subjects, limits
    // retention and storage.
    let wanted_stream = stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("$KV.{bucket}.>")],
        retention: RetentionPolicy::Limits,
        storage: wanted.storage,
        max_age: wanted.max_age,
        num_replicas: wanted.num_replicas,
        ..stream::Config::default()
    };
    let fix = format!(
        "delete it (nats kv rm {bucket}) so it is created again, or name another bucket in the config"
    );
    match check_stream("bucket", &found, &wanted_stream, &fix, true)? {
        StreamCheck::Same => {}
        StreamCheck::Update(tuned) => {
            jetstream
                .update_stream(*tuned)
                .await
                .map_err(|error| jetstream_error("updating bucket", &bucket, error))?;
            tracing::info!(bucket = %bucket, max_age = %format_duration(wanted.max_age), "updated bucket settings");
        }
    }
    Ok(())
}

/// Creates or checks everything of decisions.md#wire-protocol: the jobs and events streams, one
/// durable pull consumer per tier and the batches and workers buckets. Safe to run from every
/// process and any number of times.
pub async fn ensure_streams(jetstream: &Context, config: &NatsConfig) -> Result<(), NatsError> {
    let jobs_fix = format!(
        "delete it (nats stream rm {}, which drops its queued jobs) or set jobs_stream to another name",
        config.jobs_stream
    );
    ensure_stream(
        jetstream,
        jobs_stream_config(config),
        "stream",
        &jobs_fix,
        false,
    )
    .await?;
    let events_fix = format!(
        "delete it (nats stream rm {}, which drops every batch's events) or set events_stream to another name",
        config.events_stream
    );
    ensure_stream(
        jetstream,
        events_stream_config(config),
        "stream",
        &events_fix,
        false,
    )
    .await?;

    let jobs = jetstream
        .get_stream_no_info(&config.jobs_stream)
        .await
        .map_err(|error| jetstream_error("opening stream", &config.jobs_stream, error))?;
    for tier in Tier::ALL {
        let wanted = tier_consumer_config(config, tier);
        let name = consumer_name(tier);
        let object = format!("{}/{name}", config.jobs_stream);
        match jobs.consumer_info(&name).await {
            Ok(info) => {
                if let Some(tuned) = check_consumer(&config.jobs_stream, &info.config, &wanted)? {
                    jobs.update_consumer(tuned)
                        .await
                        .map_err(|error| jetstream_error("updating consumer", &object, error))?;
                    tracing::info!(consumer = %object, "updated consumer settings");
                }
            }
            Err(error) => {
                let not_found = matches!(
                    error.kind(),
                    async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound
                );
                if !not_found {
                    return Err(jetstream_error("reading consumer", &object, error));
                }
                jobs.create_consumer(wanted)
                    .await
                    .map_err(|error| jetstream_error("creating consumer", &object, error))?;
                tracing::info!(consumer = %object, "created consumer");
            }
        }
    }

    ensure_bucket(
        jetstream,
        bucket_config(config, &config.batches_bucket, Duration::ZERO),
    )
    .await?;
    ensure_bucket(
        jetstream,
        bucket_config(config, &config.workers_bucket, config.worker_ttl),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NatsConfig {
        NatsConfig::new("nats://127.0.0.1:4222")
    }

    /// `Ok(true)` = same, `Ok(false)` = needs an update, `Err(field)` = mismatch on field.
    fn check(edit_found: impl FnOnce(&mut stream::Config), expected: Result<bool, &str>) {
        let wanted = jobs_stream_config(&config());
        let mut found = wanted.clone();
        edit_found(&mut found);
        let got = match check_stream("stream", &found, &wanted, "delete it", false) {
            Ok(StreamCheck::Same) => Ok(true),
            Ok(StreamCheck::Update(tuned)) => {
                assert_eq!(tuned.duplicate_window, wanted.duplicate_window);
                assert_eq!(tuned.max_bytes, found.max_bytes, "operator tuning is kept");
                Ok(false)
            }
            Err(NatsError::Mismatch(mismatch)) => Err(mismatch.field),
            Err(other) => panic!("unexpected error {other}"),
        };
        assert_eq!(got, expected);
    }

    #[test]
    fn streams_are_checked_on_what_we_rely_on_and_tuned_on_the_rest() {
        check(|_| {}, Ok(true));
        check(|found| found.max_bytes = 1 << 30, Ok(true));
        check(
            |found| found.duplicate_window = Duration::from_secs(120),
            Ok(false),
        );
        check(
            |found| {
                found.max_bytes = 1 << 30;
                found.num_replicas = 3;
            },
            Ok(false),
        );
        check(
            |found| found.retention = RetentionPolicy::Limits,
            Err("retention"),
        );
        check(
            |found| found.subjects = vec!["cowork.jobs.container.>".to_owned()],
            Err("subjects"),
        );
        check(|found| found.storage = StorageType::Memory, Err("storage"));
    }

    #[test]
    fn a_mismatch_names_the_stream_the_field_both_values_and_the_fix() {
        let wanted = jobs_stream_config(&config());
        let found = stream::Config {
            retention: RetentionPolicy::Limits,
            ..wanted.clone()
        };
        let error = check_stream("stream", &found, &wanted, "delete it", false)
            .expect_err("retention differs");
        assert_eq!(
            error.to_string(),
            "stream COWORK_JOBS has retention limits but cowork needs workqueue; delete it"
        );
    }

    #[test]
    fn bucket_max_age_is_tuned_with_its_duplicate_window() {
        let wanted = stream::Config {
            name: "KV_COWORK_WORKERS".to_owned(),
            subjects: vec!["$KV.COWORK_WORKERS.>".to_owned()],
            max_age: Duration::from_secs(30),
            num_replicas: 1,
            ..stream::Config::default()
        };
        let found = stream::Config {
            max_age: Duration::from_secs(300),
            duplicate_window: Duration::from_secs(120),
            ..wanted.clone()
        };
        let Ok(StreamCheck::Update(tuned)) = check_stream("bucket", &found, &wanted, "", true)
        else {
            panic!("max_age differs, so the bucket needs an update");
        };
        assert_eq!(tuned.max_age, Duration::from_secs(30));
        assert_eq!(tuned.duplicate_window, Duration::from_secs(30));
    }

    fn check_tier(edit_found: impl FnOnce(&mut consumer::Config), expected: Result<bool, &str>) {
        let wanted = tier_consumer_config(&config(), Tier::Microvm);
        let mut found = consumer::Config {
            durable_name: wanted.durable_name.clone(),
            filter_subject: wanted.filter_subject.clone(),
            ack_policy: wanted.ack_policy,
            ack_wait: wanted.ack_wait,
            max_deliver: wanted.max_deliver,
            max_ack_pending: wanted.max_ack_pending,
            ..consumer::Config::default()
        };
        edit_found(&mut found);
        let got = match check_consumer("COWORK_JOBS", &found, &wanted) {
            Ok(None) => Ok(true),
            Ok(Some(tuned)) => {
                assert_eq!(tuned.ack_wait, wanted.ack_wait);
                assert_eq!(tuned.max_ack_pending, wanted.max_ack_pending);
                assert_eq!(tuned.max_deliver, wanted.max_deliver);
                Ok(false)
            }
            Err(NatsError::Mismatch(mismatch)) => Err(mismatch.field),
            Err(other) => panic!("unexpected error {other}"),
        };
        assert_eq!(got, expected);
    }

    #[test]
    fn tier_consumers_are_checked_and_tuned() {
        check_tier(|_| {}, Ok(true));
        check_tier(|found| found.max_ack_pending = 7, Ok(false));
        check_tier(|found| found.ack_wait = Duration::from_secs(5), Ok(false));
        check_tier(|found| found.max_deliver = -1, Ok(false));
        check_tier(
            |found| found.filter_subject = "cowork.jobs.>".to_owned(),
            Err("filter_subject"),
        );
        check_tier(
            |found| {
                found.filter_subject = String::new();
                found.filter_subjects = vec!["cowork.jobs.microvm.>".to_owned()];
            },
            Ok(true),
        );
        check_tier(|found| found.ack_policy = AckPolicy::All, Err("ack_policy"));
        check_tier(
            |found| found.deliver_subject = Some("inbox".to_owned()),
            Err("deliver_subject"),
        );
    }
}
