//! How `cp` and `pipe` reach remote hosts: the ssh command and where the far ends listen.

use std::ffi::OsString;

use wirespeed_files::Ports;
use wirespeed_files::remote::Ssh;

/// How `cp` and `pipe` reach remote hosts.
#[derive(clap::Args, Debug)]
pub struct RemoteArgs {
    /// The ssh command for remote hosts, with any options (it reads ~/.ssh/config as usual).
    #[arg(short = 'e', long = "rsh", default_value = "ssh")]
    ssh: String,
    /// Path of the wirespeed binary on remote hosts.
    #[arg(long, default_value = "wirespeed")]
    remote_bin: String,
    /// Ports the remote ends may listen on, for firewalls that open only some: LO-HI, or one
    /// PORT [default: any free port].
    #[arg(long, value_name = "LO-HI")]
    ports: Option<Ports>,
}

impl RemoteArgs {
    pub fn ports(&self) -> Ports {
        self.ports.unwrap_or(Ports::ANY)
    }

    /// `--ports` for the agents, if given.
    pub fn ports_args(&self) -> Vec<OsString> {
        self.ports.iter().flat_map(|p| ["--ports".into(), p.to_string().into()]).collect()
    }

    /// How to reach remote hosts, giving up on a silent one after `config`'s peer timeout.
    pub fn ssh(&self, config: &wirespeed::Config) -> wirespeed_files::Result<Ssh> {
        Ssh::new(&self.ssh, &self.remote_bin, config.peer_timeout)
    }
}
