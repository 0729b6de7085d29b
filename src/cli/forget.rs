//! `awl forget SUBJECT`: erase a data subject's personal data by deleting its key
//! (crypto-shredding). Every event stays as written; every reader from now on sees
//! `[erased]` where the subject's sealed values were.

use chrono::Utc;
use clap::Args;

use crate::store::EventStore;
use crate::vault::KeyId;

use super::common::actor;

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The subject, as the workflow's `subject:` renders it (`customer:42`).
    subject: String,
    /// Who asks (recorded beside the erasure; default: $USER).
    #[arg(long)]
    by: Option<String>,
}

pub async fn forget(store: EventStore, args: ForgetArgs) -> anyhow::Result<()> {
    let id = KeyId::for_subject(&args.subject);
    let by = actor(&args.by);
    if store.forget_subject_key(&id, &by, Utc::now()).await? {
        println!(
            "forgot subject {:?}: its key {id} is deleted, and its personal data reads [erased] everywhere",
            args.subject
        );
    } else {
        println!(
            "subject {:?} has no key (never seen, or already forgotten): nothing to erase",
            args.subject
        );
    }
    Ok(())
}
