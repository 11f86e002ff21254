// Trains a small MLP for a few steps through an installed tapegrad and exits non-zero unless the
// loss falls: the smallest program a user would write.
#include <tapegrad/tapegrad.h>

#include <cstdio>

int main() {
  using namespace tapegrad;
  Generator generator(7);
  nn::Sequential model(
      {std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
  Tensor x = randn({64, 8}, TensorOptions(), &generator);
  Tensor y = argmax(matmul(x, randn({8, 3}, TensorOptions(), &generator)), 1);  // a learnable labelling
  optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
  nn::CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    Tensor loss = loss_fn(model.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("consumer: loss %.4f -> %.4f, CUDA devices: %d\n", first, last, cuda::device_count());
  return last < 0.5 * first ? 0 : 1;
}
