//! sandboxd's gRPC contract (proto/process/v1/process.proto), compiled by protox: no protoc
//! needed on the machine that builds airlock.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["process/v1/process.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(descriptors)?;
    Ok(())
}
