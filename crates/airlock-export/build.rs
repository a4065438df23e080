//! The OTLP logs messages (proto/, vendored from open-telemetry/opentelemetry-proto), compiled
//! by protox: no protoc needed on the machine that builds airlock.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(
        ["opentelemetry/proto/collector/logs/v1/logs_service.proto"],
        ["proto"],
    )?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
