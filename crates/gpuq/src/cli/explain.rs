//! `gpuq explain`: why a job waits, in a sentence. For an array, one sentence
//! per group of tasks in the same situation.

use super::arrays::{target, Target};
use super::CmdResult;
use gpuq_api::Client;
use gpuq_core::JobState;

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: ExplainArgs) -> CmdResult {
    let id = match target(client, &args.id).await? {
        Target::Job(id) => id,
        Target::Array(a) => return explain_array(client, a.id, args.json).await,
    };
    let e = client.explain(id).await?;
    if args.json {
        super::output::print_json(&e);
    } else {
        let job = if args.id.contains(['.', '_']) {
            format!("task {} (job {id})", args.id)
        } else {
            format!("job {id}")
        };
        outln!("{job} {}", e.explanation);
    }
    Ok(0)
}

/// "tasks 12.[2-5] wait: its array 12 runs at most 2 tasks at once …"
async fn explain_array(client: &Client, id: u64, json: bool) -> CmdResult {
    let array = client.array(id, true).await?;
    let tasks = array.tasks.clone().unwrap_or_default();
    let queued = super::ls::waiting(client, tasks.iter()).await?;
    // Tasks in the same words share one line, in the order of their first task.
    let mut groups: Vec<(String, Vec<u32>, Vec<gpuq_api::Explanation>)> = Vec::new();
    for t in &tasks {
        let why = match t.state {
            JobState::Queued => queued
                .get(&t.id)
                .cloned()
                .unwrap_or_else(|| "is about to start".into()),
            JobState::Running => "is running".into(),
            s => format!("has ended ({s})"),
        };
        let index = t.array_index.unwrap_or_default();
        let e = gpuq_api::Explanation {
            id: t.id,
            explanation: why.clone(),
        };
        match groups.iter_mut().find(|(w, _, _)| *w == why) {
            Some((_, indices, all)) => {
                indices.push(index);
                all.push(e);
            }
            None => groups.push((why, vec![index], vec![e])),
        }
    }
    if json {
        let all: Vec<&gpuq_api::Explanation> = groups.iter().flat_map(|g| &g.2).collect();
        super::output::print_json(&all);
        return Ok(0);
    }
    outln!(
        "array {id}: {}; {}",
        super::arrays::array_shape(&array),
        array.counts_text()
    );
    for (why, indices, _) in groups {
        let (noun, verb_fix) = if indices.len() == 1 {
            ("task", why.clone())
        } else {
            ("tasks", plural_verb(&why))
        };
        let which = match indices.as_slice() {
            [k] => format!("{id}.{k}"),
            many => format!("{id}.[{}]", gpuq_core::array::compact(many)),
        };
        outln!("  {noun} {which} {verb_fix}");
    }
    Ok(0)
}

/// The sentence for several tasks: "waits: …" → "wait: …", "is running" → "are running".
fn plural_verb(why: &str) -> String {
    for (one, many) in [
        ("waits", "wait"),
        ("is ", "are "),
        ("has ", "have "),
        ("was ", "were "),
    ] {
        if let Some(rest) = why.strip_prefix(one) {
            return format!("{many}{rest}");
        }
    }
    why.to_string()
}
