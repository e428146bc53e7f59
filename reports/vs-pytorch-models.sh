# The small models hap-run is compared with PyTorch on (issue 19), sourced by vs-pytorch.sh,
# bench-kernels.sh and threads.sh: one case per line, "name|factory|inputs and factory arguments"
# (hap-import torch's and vs_pytorch.py's -i / -a) of a model in tests/import/models.py.
# shellcheck shell=bash
# shellcheck disable=SC2034 # used by the scripts that source this file
vs_pytorch_models=tests/import/models.py
vgg19_cfg='cfg=(1,1,"M",2,2,"M",4,4,4,4,"M",8,8,8,8,"M",8,8,8,8,"M")'
vs_pytorch_cases=(
  "mlp|mlp|-i x:float32[128,1024] -a width=1024 -a hidden=1024 -a layers=4 -a classes=10"
  "bert|encoder|-i tokens:int64[8,64] -a vocab=512 -a width=256 -a heads=4 -a layers=2 -a seq=64"
  "vit|vit|-i x:float32[16,3,32,32] -a image=32 -a patch=4 -a width=256 -a heads=4 -a layers=2"
  "vgg19|vgg|-i x:float32[16,3,32,32] -a width=8 -a $vgg19_cfg"
)

# vs_pytorch_import CASE MODELS HAP_IMPORT OUT: case CASE of vs_pytorch_cases into name, factory
# and args (the -i / -a words), then imported with HAP_IMPORT into the hap graph OUT. Returns 1
# when MODELS (comma-separated names; empty: all) leaves the case out; a failed import ends the
# script.
vs_pytorch_import() {
  IFS='|' read -r name factory spec <<<"$1"
  [ -z "$2" ] || [[ ",$2," == *",$name,"* ]] || return 1
  read -ra args <<<"$spec"
  "$3" torch "$vs_pytorch_models:$factory" "${args[@]}" --loss cross_entropy -o "$4" -q ||
    { echo "hap-import failed for $name" >&2; exit 1; }
}
