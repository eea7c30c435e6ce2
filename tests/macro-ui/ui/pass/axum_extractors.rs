use axum::extract::{Path, State};
use redlock_core::{Redlock, redlock};
use redlock_axum::LockRejection;

#[derive(Clone)]
struct AppState {
    redlock: Redlock,
}

#[redlock(resource = "order:{id}", redlock = state.redlock, ttl = "5s", retry_delay = 150)]
async fn pay(State(state): State<AppState>, Path(id): Path<u64>) -> Result<String, LockRejection> {
    Ok(format!("paid {id}"))
}

fn main() {
    let _: axum::Router<AppState> = axum::Router::new().route("/orders/{id}/pay", axum::routing::post(pay));
}
