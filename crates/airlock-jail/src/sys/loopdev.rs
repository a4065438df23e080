//! Loop devices: a file attached to a free one, for a session's filesystem image.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use nix::errno::Errno;

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// The device detaches itself once nothing holds it: not the fd, not a mount.
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` of linux/loop.h.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` of linux/loop.h (Linux 5.8).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A loop device with `backing` attached, set to detach itself when its last user goes: drop
/// the returned file after mounting it, and unmounting frees the device. No device is left
/// attached on any error.
pub(crate) fn attach_autoclear(backing: &File) -> Result<(PathBuf, File), Errno> {
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // Another process may take the free device between the two calls: then ask again.
    for _ in 0..8 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let number = Errno::result(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) })?;
        let path = PathBuf::from(format!("/dev/loop{number}"));
        let device = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        // SAFETY: all-zero is a valid LoopConfig (plain integers and arrays).
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = backing.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: `config` is a live loop_config, the type LOOP_CONFIGURE reads; the kernel
        // takes its own reference to the backing file.
        let attached = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        match Errno::result(attached) {
            Ok(_) => return Ok((path, device)),
            Err(Errno::EBUSY) => continue,
            Err(errno) => return Err(errno),
        }
    }
    Err(Errno::EBUSY)
}
