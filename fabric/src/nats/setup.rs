//! Start-up: creates or checks the streams, tier consumers and buckets of
//! decisions.md#wire-protocol.
//!
//! Every process that connects runs this, so it must be idempotent. A stream, consumer or
//! bucket that exists is compared with what we need. A field our semantics rely on (retention,
//! subjects, storage, filter, ack policy, pull mode) that differs is an error that names the
//! object, the field, both values and the fix: we never silently rebuild a stream, because
//! that would drop its messages. Fields that are tuning (`max_ack_pending`, `ack_wait`,
//! `max_deliver`, the duplicate window, a bucket's `max_age`, replicas) are updated in place.
//!
//! Replicas: the fleet asks R of every stream and bucket ([`Replicas`]), the operator's number
//! or, by default, the cluster's size capped at 3. An existing stream with another count is
//! moved to R in place (JetStream copies it to the new peers and moves its consumers along);
//! by default a stream is only ever scaled up, so a process started while a node is down
//! never shrinks it. A stream the server will not move (too few nodes up) keeps what it has
//! and is reported in the [`SetupReport`], never an error: the fleet works on fewer replicas.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::consumer::{self, AckPolicy, pull};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{ErrorCode, context::GetStreamErrorKind};
use cowork_schema::job::Tier;

use cowork_schema::duration::format_duration;

/// The most replicas the default asks for: three nodes survive the loss of one, and more only
/// make every write wait for more acknowledgements.
pub const DEFAULT_MAX_REPLICAS: usize = 3;

/// How many replicas the fleet asks of every stream and bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub count: usize,
    /// The operator gave the number: it is applied exactly, also downwards. Otherwise it was
    /// found from the server and an existing stream is only scaled up.
    pub explicit: bool,
}

impl Replicas {
    /// The replicas of `config` against the server that sent `info`: the configured number,
    /// or the cluster's size capped at [`DEFAULT_MAX_REPLICAS`] (1 outside a cluster).
    ///
    /// The cluster's size is the number of servers whose client URLs the server advertises
    /// (its own among them); a server configured not to advertise them falls back to the URLs
    /// the client was given. A node down at this moment is not counted.
    pub fn resolve(config: &NatsConfig, info: &async_nats::ServerInfo) -> Replicas {
        if let Some(count) = config.replicas {
            return Replicas {
                count,
                explicit: true,
            };
        }
        let count = if info.cluster.is_none() {
            1
        } else {
            let mut advertised: Vec<&str> = info.connect_urls.iter().map(String::as_str).collect();
            advertised.sort_unstable();
            advertised.dedup();
            let n_servers = if advertised.is_empty() {
                config.server_urls().len()
            } else {
                advertised.len()
            };
            n_servers.clamp(1, DEFAULT_MAX_REPLICAS)
        };
        Replicas {
            count,
            explicit: false,
        }
    }
}

/// What `ensure_streams` could not make as asked, for the operator; the fleet runs anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupReport {
    /// One line per stream or bucket left with fewer replicas than asked, naming it, both
    /// counts and the server's refusal.
    pub short_of_replicas: Vec<String>,
}

use crate::nats::config::NatsConfig;
use crate::nats::{
    EVENTS_SUBJECTS, JOBS_SUBJECTS, Mismatch, NatsError, consumer_name, tier_filter,
};

/// The jobs stream we need.
fn jobs_stream_config(config: &NatsConfig, replicas: usize) -> stream::Config {
    stream::Config {
        name: config.jobs_stream.clone(),
        description: Some("cowork fleet jobs, one subject per tier and batch".to_owned()),
        subjects: vec![JOBS_SUBJECTS.to_owned()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        duplicate_window: config.duplicate_window,
        num_replicas: replicas,
        ..stream::Config::default()
    }
}

/// The events stream we need. Its duplicate window stays at JetStream's default (2 min): it
/// only has to cover a worker retrying a publish whose acknowledgement it lost.
fn events_stream_config(config: &NatsConfig, replicas: usize) -> stream::Config {
    stream::Config {
        name: config.events_stream.clone(),
        description: Some("cowork fleet job events, one subject per batch".to_owned()),
        subjects: vec![EVENTS_SUBJECTS.to_owned()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: replicas,
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

fn bucket_config(bucket: &str, max_age: Duration, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: bucket.to_owned(),
        history: 1,
        max_age,
        storage: StorageType::File,
        num_replicas: replicas,
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

/// How `check_stream` treats what it finds.
#[derive(Clone, Copy, Debug)]
struct CheckRules<'a> {
    /// Names the object in errors (`stream`, `bucket`).
    kind: &'static str,
    /// What the operator can do about a mismatch.
    fix: &'a str,
    /// `max_age` is ours to set (buckets) rather than the operator's (streams).
    tune_max_age: bool,
    /// The wanted replicas are applied exactly; otherwise a stream is only scaled up.
    exact_replicas: bool,
}

/// Compares a found stream with the wanted one.
fn check_stream(
    found: &stream::Config,
    wanted: &stream::Config,
    rules: CheckRules<'_>,
) -> Result<StreamCheck, NatsError> {
    let CheckRules {
        kind,
        fix,
        tune_max_age,
        exact_replicas,
    } = rules;
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
    tuned.num_replicas = if exact_replicas {
        wanted.num_replicas
    } else {
        wanted.num_replicas.max(found.num_replicas)
    };
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

/// Applies `tuned` to the existing stream `name`. When the server refuses only the new
/// replica count (too few nodes up to place them), the other tuning is applied on the replicas
/// the stream has, and the shortfall is written into `report`.
async fn update_stream(
    jetstream: &Context,
    found: &stream::Config,
    tuned: stream::Config,
    what: &str,
    report: &mut SetupReport,
) -> Result<(), NatsError> {
    let name = tuned.name.clone();
    let wanted_replicas = tuned.num_replicas;
    let error = match jetstream.update_stream(tuned.clone()).await {
        Ok(_) => {
            if wanted_replicas != found.num_replicas {
                tracing::info!(stream = %name, from = found.num_replicas, to = wanted_replicas, "moved stream to new replica count");
            }
            return Ok(());
        }
        Err(error) => error,
    };
    if wanted_replicas == found.num_replicas {
        return Err(jetstream_error(
            "updating",
            &format!("{what} {name}"),
            error,
        ));
    }
    let reason = crate::error_chain(&error);
    let kept = stream::Config {
        num_replicas: found.num_replicas,
        ..tuned
    };
    if kept != *found {
        jetstream
            .update_stream(kept)
            .await
            .map_err(|error| jetstream_error("updating", &format!("{what} {name}"), error))?;
    }
    let noun = if found.num_replicas == 1 {
        "replica"
    } else {
        "replicas"
    };
    let line = format!(
        "{what} {name} has {} {noun}, {wanted_replicas} asked: the server refused to move it ({reason})",
        found.num_replicas
    );
    tracing::warn!(stream = %name, replicas = found.num_replicas, asked = wanted_replicas, error = %reason, "stream has fewer replicas than asked");
    report.short_of_replicas.push(line);
    Ok(())
}

/// Creates the stream, or checks and tunes the existing one.
async fn ensure_stream(
    jetstream: &Context,
    wanted: stream::Config,
    rules: CheckRules<'_>,
    report: &mut SetupReport,
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
    match check_stream(&found, &wanted, rules)? {
        StreamCheck::Same => {}
        StreamCheck::Update(tuned) => {
            update_stream(jetstream, &found, *tuned, "stream", report).await?;
            tracing::info!(stream = %name, "updated stream settings");
        }
    }
    Ok(())
}

/// Creates the bucket, or checks and tunes the existing one.
async fn ensure_bucket(
    jetstream: &Context,
    wanted: kv::Config,
    exact_replicas: bool,
    report: &mut SetupReport,
) -> Result<(), NatsError> {
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
    let rules = CheckRules {
        kind: "bucket",
        fix: &fix,
        tune_max_age: true,
        exact_replicas,
    };
    match check_stream(&found, &wanted_stream, rules)? {
        StreamCheck::Same => {}
        StreamCheck::Update(tuned) => {
            update_stream(jetstream, &found, *tuned, "bucket", report).await?;
            tracing::info!(bucket = %bucket, max_age = %format_duration(wanted.max_age), "updated bucket settings");
        }
    }
    Ok(())
}

/// Creates or checks everything the fleet needs: the jobs and events streams, one durable pull
/// consumer per tier and the batches and workers buckets, each with `replicas`. Safe to run
/// from every process and any number of times. The tier consumers inherit the jobs stream's
/// replicas (JetStream moves them along when the stream is moved).
pub async fn ensure_streams(
    jetstream: &Context,
    config: &NatsConfig,
    replicas: Replicas,
) -> Result<SetupReport, NatsError> {
    let mut report = SetupReport::default();
    let jobs_fix = format!(
        "delete it (nats stream rm {}, which drops its queued jobs) or set jobs_stream to another name",
        config.jobs_stream
    );
    let stream_rules = |fix| CheckRules {
        kind: "stream",
        fix,
        tune_max_age: false,
        exact_replicas: replicas.explicit,
    };
    ensure_stream(
        jetstream,
        jobs_stream_config(config, replicas.count),
        stream_rules(&jobs_fix),
        &mut report,
    )
    .await?;
    let events_fix = format!(
        "delete it (nats stream rm {}, which drops every batch's events) or set events_stream to another name",
        config.events_stream
    );
    ensure_stream(
        jetstream,
        events_stream_config(config, replicas.count),
        stream_rules(&events_fix),
        &mut report,
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
        bucket_config(&config.batches_bucket, Duration::ZERO, replicas.count),
        replicas.explicit,
        &mut report,
    )
    .await?;
    ensure_bucket(
        jetstream,
        bucket_config(&config.workers_bucket, config.worker_ttl, replicas.count),
        replicas.explicit,
        &mut report,
    )
    .await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NatsConfig {
        NatsConfig::new("nats://127.0.0.1:4222")
    }

    fn rules(kind: &'static str, tune_max_age: bool, exact_replicas: bool) -> CheckRules<'static> {
        CheckRules {
            kind,
            fix: "delete it",
            tune_max_age,
            exact_replicas,
        }
    }

    /// `Ok(true)` = same, `Ok(false)` = needs an update, `Err(field)` = mismatch on field.
    fn check(edit_found: impl FnOnce(&mut stream::Config), expected: Result<bool, &str>) {
        let wanted = jobs_stream_config(&config(), 1);
        let mut found = wanted.clone();
        edit_found(&mut found);
        let got = match check_stream(&found, &wanted, rules("stream", false, true)) {
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

    /// The replica count `check_stream` settles on for a stream found with `found` replicas.
    fn settled_replicas(found: usize, wanted: usize, exact: bool) -> usize {
        let wanted = jobs_stream_config(&config(), wanted);
        let found = stream::Config {
            num_replicas: found,
            ..wanted.clone()
        };
        match check_stream(&found, &wanted, rules("stream", false, exact)) {
            Ok(StreamCheck::Same) => found.num_replicas,
            Ok(StreamCheck::Update(tuned)) => tuned.num_replicas,
            Err(error) => panic!("unexpected error {error}"),
        }
    }

    #[test]
    fn found_replicas_are_raised_by_default_and_set_exactly_when_given() {
        // (found, wanted, exact) -> settled
        for (found, wanted, exact, settled) in [
            (1, 3, false, 3),
            (3, 3, false, 3),
            (3, 2, false, 3),
            (3, 1, true, 1),
            (1, 3, true, 3),
        ] {
            assert_eq!(
                settled_replicas(found, wanted, exact),
                settled,
                "found {found}, wanted {wanted}, exact {exact}"
            );
        }
    }

    #[test]
    fn default_replicas_follow_the_cluster_size_capped_at_three() {
        let check = |cluster: Option<&str>, advertised: &[&str], urls: &str, expected: usize| {
            let info = async_nats::ServerInfo {
                cluster: cluster.map(str::to_owned),
                connect_urls: advertised.iter().map(|url| (*url).to_owned()).collect(),
                ..async_nats::ServerInfo::default()
            };
            let replicas = Replicas::resolve(&NatsConfig::new(urls), &info);
            assert_eq!(
                replicas,
                Replicas {
                    count: expected,
                    explicit: false
                },
                "{cluster:?} {advertised:?} {urls}"
            );
        };
        check(None, &[], "nats://a:4222", 1);
        check(None, &["a:4222"], "nats://a:4222,nats://b:4222", 1);
        check(Some("c"), &["a:1", "b:1", "c:1"], "nats://a:1", 3);
        check(Some("c"), &["a:1", "b:1", "a:1"], "nats://a:1", 2);
        check(
            Some("c"),
            &["a:1", "b:1", "c:1", "d:1", "e:1"],
            "nats://a:1",
            3,
        );
        check(Some("c"), &[], "nats://a:1,nats://b:1", 2);
        let mut config = NatsConfig::new("nats://a:1");
        config.replicas = Some(5);
        assert_eq!(
            Replicas::resolve(&config, &async_nats::ServerInfo::default()),
            Replicas {
                count: 5,
                explicit: true
            }
        );
    }

    #[test]
    fn a_mismatch_names_the_stream_the_field_both_values_and_the_fix() {
        let wanted = jobs_stream_config(&config(), 1);
        let found = stream::Config {
            retention: RetentionPolicy::Limits,
            ..wanted.clone()
        };
        let error = check_stream(&found, &wanted, rules("stream", false, true))
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
        let Ok(StreamCheck::Update(tuned)) =
            check_stream(&found, &wanted, rules("bucket", true, true))
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
