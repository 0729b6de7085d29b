# awl in a container: a release build, then a slim runtime image.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches
RUN cargo build --release --locked --bin awl

FROM debian:bookworm-slim
RUN useradd --system --create-home --home-dir /var/lib/awl awl
COPY --from=build /src/target/release/awl /usr/local/bin/awl
COPY workflows /workflows
USER awl
WORKDIR /var/lib/awl
ENTRYPOINT ["awl"]
CMD ["serve", "--bind", "0.0.0.0:8080", "--workflows", "/workflows"]
