//! `cowork notify-test URL`: one signed sample event, sent once; the status the hook answered
//! is printed. Exit 0 on a 2xx, 1 on any other answer or none, 2 on a bad URL or secret file.

use cowork_core::notify::NotifyEvent;
use cowork_schema::BatchId;

use crate::args::NotifyTestArgs;
use crate::exit::CliError;

pub async fn run(args: &NotifyTestArgs) -> Result<i32, CliError> {
    crate::notify::check_urls(std::slice::from_ref(&args.url))?;
    let secret = crate::notify::read_secret(args.notify_secret_file.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let event = NotifyEvent::Test {
        batch_id: BatchId::from_time(now, 0),
    };
    let hook = cowork_coordinator::notify::origin(&args.url);
    let signed = if secret.is_some() {
        "signed"
    } else {
        "unsigned"
    };
    match cowork_coordinator::notify::post_once(&args.url, secret.as_ref(), &event).await {
        Ok(status) => {
            println!("{hook} answered {status} to a {signed} test event");
            Ok(if (200..300).contains(&status) { 0 } else { 1 })
        }
        Err(error) => {
            println!("{error}");
            Ok(1)
        }
    }
}
