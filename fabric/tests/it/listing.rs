//! `ArtifactStore::list_page` against `list`, on both stores (a directory and a real s3s-fs
//! server): paging with any page size gives the whole listing, in order, exactly once, and a
//! page starts after any marker, a key or not. The keys are picked to trip a walk that sorts
//! names instead of keys (`a-b` sorts before `a/x`: `-` is below `/`) and a prefix that stops
//! mid-name (`batches/b1` must not leave out `batches/b10/`).

use cowork_fabric::artifacts::ArtifactStore;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_testkit::S3Server;

const KEYS: &[&str] = &[
    "batches/b1/a-b",
    "batches/b1/a/x",
    "batches/b1/a/y/z",
    "batches/b1/a0",
    "batches/b1/b",
    "batches/b10/spec.json",
    "batches/b2/spec.json",
    "other/k",
];

const PREFIXES: &[&str] = &[
    "",
    "batches/",
    "batches/b1",
    "batches/b1/",
    "batches/b1/a",
    "batches/b1/a/",
    "nothing/",
];

const MARKERS: &[&str] = &[
    "",
    "a",
    "batches/b1/a",
    "batches/b1/a-",
    "batches/b1/a/",
    "batches/b1/a/x",
    "batches/b1/a/y",
    "batches/b1/b",
    "batches/b10/",
    "zzz",
];

async fn check_pages(store: &dyn ArtifactStore) {
    for key in KEYS {
        store.put(key, b"{}".to_vec()).await.expect("put");
    }
    for prefix in PREFIXES {
        let whole = store.list(prefix).await.expect("list");
        // `list` is itself a page without a bound on the directory store: held to the keys.
        let mut expected: Vec<String> = KEYS
            .iter()
            .filter(|key| key.starts_with(prefix))
            .map(|key| (*key).to_owned())
            .collect();
        expected.sort();
        assert_eq!(whole, expected, "list({prefix:?})");
        for limit in [1, 2, 3, 1_000] {
            let mut paged = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = store
                    .list_page(prefix, after.as_deref(), limit)
                    .await
                    .expect("list_page");
                assert!(page.len() <= limit, "{prefix:?} limit {limit}: {page:?}");
                paged.extend(page.iter().cloned());
                if page.len() < limit {
                    break;
                }
                after = page.last().cloned();
            }
            assert_eq!(paged, whole, "prefix {prefix:?}, pages of {limit}");
        }
        for marker in MARKERS {
            let expected: Vec<String> = whole
                .iter()
                .filter(|key| key.as_str() > *marker)
                .take(2)
                .cloned()
                .collect();
            let page = store
                .list_page(prefix, Some(marker), 2)
                .await
                .expect("list_page");
            assert_eq!(page, expected, "prefix {prefix:?} after {marker:?}");
        }
        assert!(
            store
                .list_page(prefix, None, 0)
                .await
                .expect("list_page")
                .is_empty(),
            "a page of 0 keys"
        );
    }
}

#[tokio::test]
async fn directory_store_pages_match_the_whole_listing() {
    let dir = tempfile::tempdir().expect("temp dir");
    check_pages(&DirArtifactStore::new(dir.path())).await;
}

#[tokio::test]
async fn s3_store_pages_match_the_whole_listing() {
    let server = S3Server::start();
    let mut config = crate::s3::config(&server);
    // Server pages shorter than the port's: a port page is made of several requests.
    config.list_page_size = 2;
    check_pages(&crate::s3::connect(&config).await).await;
}
