// Package jupyter tests `jailcell kernel` and `jailcell kernelspec install`
// as Jupyter users meet them: a real `jailcell serve` started by the test,
// the kernelspec installed where jupyter_client finds it, and the kernel
// started by Debian's jupyter_client and nbclient as a user who is not
// root but is admitted by the service's group. Notebooks executed by
// nbclient on the jailcell kernel are compared with the same run on
// ipykernel. It must never touch the user's own Jupyter directories:
// every kernelspec goes under a temporary HOME or data directory.
package jupyter
