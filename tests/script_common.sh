# Sourced by the test scripts (after LCT=$1): a scratch folder $work, removed on exit and
# made the current directory (a script with more to undo sets its own EXIT trap after
# this, removing $work too); OpenMPI's settings for the tests and MPIRUN; fail; model_keys.
[ -z "${LCT:-}" ] || LCT=$(realpath "$LCT")  # a relative path still names the binary in $work
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_WAIT_POLICY=PASSIVE
# OpenMPI as root, on one host: it selects ob1 over shared memory whatever it probes, and
# naming them skips the probes of the transports it would reject (UCX, OFI, PSM2, openib,
# TCP): 0.63 s -> 0.42 s for 4 ranks of MPI_Init and MPI_Finalize. scripts/cluster.sh
# names its own (TCP between hosts) on its command line, which overrides these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
# OpenMPI's session folder in the scratch folder, not /tmp/ompi.HOST.UID, which every
# mpirun on the machine shares: two launched at once (ctest -j2 runs two MPI scripts)
# race to create and remove it ("mkdir ... /tmp/ompi.vm.0: File exists", orte_init fails)
export OMPI_MCA_orte_tmpdir_base=$work
MPIRUN="mpirun --oversubscribe --bind-to none"  # more ranks than cores

fail() { echo "FAIL: $*"; exit 1; }

# model_keys HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS: a small model's shape as lct keys
model_keys() {
  echo "--model.hidden_size $1 --model.intermediate_size $2 --model.num_hidden_layers $3" \
    "--model.num_attention_heads $4 --model.num_key_value_heads $5"
}
