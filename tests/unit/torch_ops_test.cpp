// The torch layer's naming of ATen operators, its operator filter and its dynamic table.
// Symbols and schema strings below are copied from Debian's libtorch_cpu.so.1.13.
#include "layers/torch/torch_ops.h"

#include <gtest/gtest.h>

#include <string>

#include "session/nested_time.h"

namespace eacgm {
namespace {

using namespace std::string_literals;

TEST(AtenOpStruct, ParsesTheCallEntryPoint) {
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops11softmax_int4callERKNS_6TensorElN3c108optionalINS5_"
                           "10ScalarTypeEEE"),
            "softmax_int");
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops2mm4callERKNS_6TensorES4_"), "mm");
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops18_foreach_add__List4callEN3c108ArrayRefINS_6TensorEEES6_"
                           "RKNS2_6ScalarE"),
            "_foreach_add__List");
}

TEST(AtenOpStruct, RejectsEverythingElse) {
  // redispatch is reached from inside another operator's kernel: tracing it would count twice.
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops11softmax_int10redispatchEN3c1014DispatchKeySetE"),
            std::nullopt);
  EXPECT_EQ(aten_op_struct("_ZN2at6native2mmERKNS_6TensorES3_"), std::nullopt);
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops"), std::nullopt);
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops99mm4callE"), std::nullopt);  // length past the end
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops0mm4callE"), std::nullopt);   // empty name
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops2mm5callsE"), std::nullopt);  // not ::call
  EXPECT_EQ(aten_op_struct("_ZN2at4_ops3m-m4callE"), std::nullopt);  // not an identifier
  EXPECT_EQ(aten_op_struct("mm"), std::nullopt);
}

// A piece of .rodata: schemas, a bare operator name, and strings that only look alike.
const std::string kRodata =
    "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor\0"s
    "softmax.int_out(Tensor self, int dim, ScalarType? dtype=None, *, Tensor(a!) out) -> "
    "Tensor(a!)\0"s
    "linear_backward(Tensor self, Tensor grad_output, Tensor weight, bool[3] output_mask) -> "
    "(Tensor, Tensor, Tensor)\0"s
    "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor\0"s
    "_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()\0"s
    "_foreach_add.List(Tensor[] self, Tensor[] other, *, Scalar alpha=1) -> Tensor[]\0"s
    "aten::scatter_reduce\0"s
    "scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor\0"s
    "mm(self, other): Shape mismatch: expected matrix\0"s
    "special_erfinv.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)\0"s
    "erfinv(Tensor self) -> Tensor\0"s
    "aten::addmm.out\0"s;

TEST(AtenOpNamer, NamesFromTheLibrarySchemas) {
  AtenOpNamer namer;
  namer.learn_strings(kRodata);
  EXPECT_EQ(namer.name("softmax_int"), "aten::softmax.int");
  EXPECT_EQ(namer.name("softmax_int_out"), "aten::softmax.int_out");
  // An underscore is not always an overload separator: only the schema can tell.
  EXPECT_EQ(namer.name("linear_backward"), "aten::linear_backward");
  EXPECT_EQ(namer.name("linear"), "aten::linear");
  EXPECT_EQ(namer.name("_foreach_add__List"), "aten::_foreach_add_.List");
  EXPECT_EQ(namer.name("_foreach_add_List"), "aten::_foreach_add.List");
  // A schema outranks a bare name that maps to the same struct.
  EXPECT_EQ(namer.name("scatter_reduce"), "aten::scatter.reduce");
  EXPECT_EQ(namer.name("addmm_out"), "aten::addmm.out");
  EXPECT_EQ(namer.schemas(), 9u);
}

TEST(AtenOpNamer, SplitsAfterAKnownOperatorWhenNoSchemaNamesIt) {
  AtenOpNamer namer;
  namer.learn_strings(kRodata);
  // erfinv.out's schema was merged into special_erfinv.out's by the linker.
  EXPECT_EQ(namer.name("erfinv_out"), "aten::erfinv.out");
  // Nothing known: an operator without overload.
  EXPECT_EQ(namer.name("brand_new_op"), "aten::brand_new_op");
  AtenOpNamer empty;
  EXPECT_EQ(empty.name("softmax_int"), "aten::softmax_int");
}

TEST(TorchOpFilter, DefaultSetHasTheCostlyOperatorsOnly) {
  const TorchOpFilter f = TorchOpFilter::default_set();
  for (const char* name : {"aten::mm",
                           "aten::mm.out",
                           "aten::addmm",
                           "aten::bmm",
                           "aten::matmul",
                           "aten::linear",
                           "aten::conv2d",
                           "aten::convolution",
                           "aten::convolution_backward",
                           "aten::_scaled_dot_product_attention",
                           "aten::softmax.int",
                           "aten::_softmax",
                           "aten::_softmax_backward_data",
                           "aten::layer_norm",
                           "aten::native_layer_norm",
                           "aten::native_batch_norm_backward",
                           "aten::embedding",
                           "aten::embedding_dense_backward",
                           "aten::relu",
                           "aten::relu_",
                           "aten::gelu_backward",
                           "aten::threshold_backward",
                           "aten::cross_entropy_loss",
                           "aten::nll_loss_forward",
                           "aten::mse_loss",
                           "aten::_foreach_add_.List",
                           "aten::addcdiv_",
                           "aten::copy_",
                           "aten::to.dtype",
                           "aten::_to_copy",
                           "aten::cat",
                           "aten::stack",
                           "aten::dropout",
                           "aten::max_pool2d"}) {
    EXPECT_TRUE(f.selects(name)) << name;
  }
  for (const char* name : {"aten::add.Tensor", "aten::mul", "aten::view", "aten::t",
                           "aten::as_strided", "aten::resolve_conj", "aten::empty.memory_format",
                           "aten::_convert_indices_from_coo_to_csr", "aten::zeros"}) {
    EXPECT_FALSE(f.selects(name)) << name;
  }
}

TEST(TorchOpFilter, RegexMatchesAWholeForm) {
  auto f = TorchOpFilter::parse("mm|addmm");
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->selects("aten::mm"));
  EXPECT_TRUE(f->selects("aten::mm.out"));  // the operator's name, any overload
  EXPECT_TRUE(f->selects("aten::addmm"));
  EXPECT_FALSE(f->selects("aten::bmm"));  // whole match, not a substring
  auto g = TorchOpFilter::parse(R"(aten::softmax\.int)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->selects("aten::softmax.int"));
  EXPECT_FALSE(g->selects("aten::softmax.int_out"));
  EXPECT_FALSE(g->selects("aten::softmax.Dimname"));
  auto all = TorchOpFilter::parse("all");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->selects("aten::anything.at_all"));
  EXPECT_EQ(all->spec(), "all");
}

TEST(TorchOpFilter, BadExpressionsAreErrors) {
  for (const char* spec : {"(", "[a-", "*x", ""}) {
    auto f = TorchOpFilter::parse(spec);
    ASSERT_FALSE(f) << spec;
    EXPECT_NE(f.error().message.find("--torch-ops"), std::string::npos) << f.error().message;
  }
}

TEST(TorchOpTable, OneStableRowPerName) {
  TorchOpTable table;
  const auto mm = table.intern("aten::mm");
  const auto addmm = table.intern("aten::addmm");
  ASSERT_TRUE(mm && addmm);
  EXPECT_EQ(*mm, 0u);
  EXPECT_EQ(*addmm, 1u);
  EXPECT_EQ(table.intern("aten::mm"), mm);
  const ProbeSpec* row = table.row(*mm);
  ASSERT_NE(row, nullptr);
  for (int i = 0; i < 1000; ++i) table.intern("aten::op" + std::to_string(i));
  // Rows never move: a CallRecord keeps its spec pointer for the whole session.
  EXPECT_EQ(table.row(*mm), row);
  EXPECT_EQ(row->symbol, "aten::mm");
  EXPECT_EQ(row->layer, Layer::kTorch);
  EXPECT_FALSE(row->returns_status);
  EXPECT_EQ(table.row(5000), nullptr);
}

TEST(TorchOpTable, FullAtTheBpfLimit) {
  TorchOpTable table;
  for (int i = 0; i < EACGM_MAX_FUNCS; ++i) {
    ASSERT_TRUE(table.intern("aten::op" + std::to_string(i)));
  }
  EXPECT_EQ(table.intern("aten::one_too_many"), std::nullopt);
  EXPECT_EQ(table.intern("aten::op7"), 7u);  // known names still resolve
}

TEST(NestedTime, ChildrenAreClaimedByTheirParentOnly) {
  NestedTime n;
  // Thread 1: parent [100, 200) with children [110, 130) and [140, 170), the second with a
  // grandchild [150, 160). Calls arrive as they return.
  EXPECT_EQ(n.children_ns(1, 110, 20, 1), 0u);
  EXPECT_EQ(n.children_ns(1, 150, 10, 2), 0u);
  EXPECT_EQ(n.children_ns(1, 140, 30, 1), 10u);
  // Thread 2 interleaves and is kept apart.
  EXPECT_EQ(n.children_ns(2, 120, 5, 1), 0u);
  EXPECT_EQ(n.children_ns(1, 100, 100, 0), 50u);
  EXPECT_EQ(n.children_ns(2, 115, 50, 0), 5u);
  // A later parent claims nothing that ran before it.
  EXPECT_EQ(n.children_ns(1, 300, 10, 0), 0u);
}

}  // namespace
}  // namespace eacgm
